//! The failures every loop shares (the store, a plugin, the workspace), embedded in each
//! loop's own error type (`FixError`, `AgentError`, `LoopError`) so that the three name them
//! once and alike.

/// A failure of the host's own parts, not of the model or the task.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The store failed (or refused an overlapping loop).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A plugin failed while describing itself or its tools.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// The workspace could not be opened or read.
    #[error(transparent)]
    Edit(#[from] crate::edit::EditError),
}

/// `From` the store's, the plugins' and the workspace's errors for a loop's error type that
/// embeds [`HostError`] as its `Host` variant (so `?` works on each).
macro_rules! from_host_errors {
    ($t:ty) => {
        impl From<crate::store::StoreError> for $t {
            fn from(e: crate::store::StoreError) -> Self {
                Self::Host(e.into())
            }
        }
        impl From<crate::plugin::PluginError> for $t {
            fn from(e: crate::plugin::PluginError) -> Self {
                Self::Host(e.into())
            }
        }
        impl From<crate::edit::EditError> for $t {
            fn from(e: crate::edit::EditError) -> Self {
                Self::Host(e.into())
            }
        }
    };
}
pub(crate) use from_host_errors;
