//! Batches of tasks (`kiln batch`) and the workers that run them (`kiln worker`): the task
//! file, the work queue in the store (claims with leases, heartbeats, results fenced by
//! attempt), fresh checkouts, and the child `kiln` each task runs as.

pub mod checkout;
pub mod db;
pub mod exec;
pub mod queue;
pub mod task;
pub mod worker;

pub use queue::{Budgets, Claim, Completion, Counts, Queue};
pub use task::Task;
