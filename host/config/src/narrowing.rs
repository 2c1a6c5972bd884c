//! Narrowing: how a value an untrusted workspace `kiln.toml` sets applies. One trait,
//! [`Narrow`], implemented per kind of field (a limit only lowers, a switch may only turn
//! protection on, a field is ignored until the file is trusted, ...). Every field of the
//! schema names its rule beside it (in `schema`, through [`narrow_fields!`]), and the rule
//! carries the field's default where it needs one. A field added to a section without a rule
//! does not compile: the section is taken apart field by field, with no `..`.
//!
//! This file knows no section of the schema; the schema knows these rules.

use serde::Serialize;
use std::fmt::Display;

/// How a value of type `T` that an untrusted workspace file sets applies, given what applies
/// so far (`have`: the user's configuration and the layers before). The value returned is
/// what may apply (merged like any layer's); every key that does not apply is named in
/// `ignored` (`plugins.x.exec`, `llm.max_tokens (raises 4096 to 100000)`), for the warning
/// that asks to trust the file.
///
/// A section implements it through [`Fields`], taking itself apart with [`narrow_fields!`]:
///
/// ```
/// use kiln_config::narrowing::{Free, Lower, Narrow};
/// #[derive(Default)]
/// struct Limits { note: Option<String>, max: Option<u32> }
/// struct Section;
/// impl Narrow<Limits> for Section {
///     fn narrow(&self, key: &str, value: Limits, have: &Limits, ignored: &mut Vec<String>) -> Limits {
///         kiln_config::narrow_fields!(Limits { note: Free, max: Lower(10) }, value, have, key, ignored)
///     }
/// }
/// let mut ignored = Vec::new();
/// let wrote = Limits { note: Some("hi".into()), max: Some(50) };
/// let got = Section.narrow("s", wrote, &Limits::default(), &mut ignored);
/// assert_eq!((got.note.as_deref(), got.max), (Some("hi"), None));
/// assert_eq!(ignored, ["s.max (raises 10 to 50)"]);
/// ```
///
/// A field without a rule does not compile (E0027, the pattern does not mention it):
///
/// ```compile_fail,E0027
/// use kiln_config::narrowing::{Free, Narrow};
/// struct Limits { note: Option<String>, added_later: Option<u32> }
/// struct Section;
/// impl Narrow<Limits> for Section {
///     fn narrow(&self, key: &str, value: Limits, have: &Limits, ignored: &mut Vec<String>) -> Limits {
///         kiln_config::narrow_fields!(Limits { note: Free }, value, have, key, ignored)
///     }
/// }
/// ```
pub trait Narrow<T, Have: ?Sized = T> {
    /// What of `value` (set at `key`) applies on top of `have`.
    fn narrow(&self, key: &str, value: T, have: &Have, ignored: &mut Vec<String>) -> T;
}

/// Take a section apart field by field (no `..`: a field without a rule is a compile error)
/// and narrow each by the rule written beside it; the key of a field is `KEY.FIELD`. The
/// fields are narrowed (and named in `ignored`) in the order written.
#[doc(hidden)]
#[macro_export]
macro_rules! narrow_fields {
    ($ty:ident { $($field:ident: $rule:expr),* $(,)? }, $value:expr, $have:expr, $key:expr, $ignored:expr) => {{
        let $ty { $($field),* } = $value;
        let (have, key, ignored): (&$ty, &str, &mut Vec<String>) = ($have, $key, $ignored);
        $ty {
            $($field: $crate::narrowing::Narrow::narrow(
                &$rule,
                &$crate::narrowing::field_key(key, stringify!($field)),
                $field,
                &have.$field,
                ignored,
            ),)*
        }
    }};
}

/// `KEY.FIELD` (just `FIELD` at the top).
pub fn field_key(key: &str, field: &str) -> String {
    if key.is_empty() {
        field.to_string()
    } else {
        format!("{key}.{field}")
    }
}

/// Applies as written: it costs and grants nothing (sampling switches, the edit format), or
/// the merge can only add protection with it (`[sandbox] protect` globs accumulate).
pub struct Free;

impl<T> Narrow<T> for Free {
    fn narrow(&self, _: &str, value: T, _: &T, _: &mut Vec<String>) -> T {
        value
    }
}

/// A limit with a default (the field's default, written beside it): applies only where it
/// lowers what applies, the default when nothing set it.
pub struct Lower<T>(pub T);

impl<T: PartialOrd + Display + Copy> Narrow<Option<T>> for Lower<T> {
    fn narrow(
        &self,
        key: &str,
        value: Option<T>,
        have: &Option<T>,
        ignored: &mut Vec<String>,
    ) -> Option<T> {
        lower_only(key, value, have.unwrap_or(self.0), ignored)
    }
}

/// A cap with no default (none: no cap): adds one where none applies, else only lowers.
pub struct Cap;

impl<T: PartialOrd + Display + Copy> Narrow<Option<T>> for Cap {
    fn narrow(
        &self,
        key: &str,
        value: Option<T>,
        have: &Option<T>,
        ignored: &mut Vec<String>,
    ) -> Option<T> {
        match *have {
            Some(h) => lower_only(key, value, h, ignored),
            None => value,
        }
    }
}

/// A text of at most this many bytes (a longer one needs trust).
pub struct MaxBytes(pub usize);

impl Narrow<Option<String>> for MaxBytes {
    fn narrow(
        &self,
        key: &str,
        value: Option<String>,
        _: &Option<String>,
        ignored: &mut Vec<String>,
    ) -> Option<String> {
        match value {
            Some(v) if v.len() > self.0 => {
                ignored.push(format!("{key} (longer than {} bytes)", self.0));
                None
            }
            v => v,
        }
    }
}

/// A switch that adds protection: an untrusted file may turn it on; `false` is dropped
/// (it would take protection away), silently, since it asks for nothing.
pub struct OnlyOn;

impl Narrow<Option<bool>> for OnlyOn {
    fn narrow(
        &self,
        _: &str,
        value: Option<bool>,
        _: &Option<bool>,
        _: &mut Vec<String>,
    ) -> Option<bool> {
        value.filter(|on| *on)
    }
}

/// Needs trust: never applies from an untrusted file (it grants, costs or points somewhere).
/// Named in `ignored` when set, its tables expanded this many levels (`mcp.servers.NAME` is 2
/// below `mcp`); an empty table sets nothing and is not named.
pub struct Trusted(pub usize);

impl<T: Serialize> Narrow<Option<T>> for Trusted {
    fn narrow(
        &self,
        key: &str,
        value: Option<T>,
        _: &Option<T>,
        ignored: &mut Vec<String>,
    ) -> Option<T> {
        if let Some(v) = value {
            match toml::Value::try_from(&v) {
                Ok(v) => set_keys(key, &v, self.0, ignored),
                Err(_) => ignored.push(key.to_string()),
            }
        }
        None
    }
}

/// Only the user's own configuration may set it: a workspace file that does is refused whole,
/// trusted or not, before narrowing (`[store]`, `[batch]`, `[gc]`); nothing of it applies here.
pub struct UserOnly;

impl<T> Narrow<Option<T>> for UserOnly {
    fn narrow(&self, _: &str, _: Option<T>, _: &Option<T>, _: &mut Vec<String>) -> Option<T> {
        None
    }
}

/// A table whose fields each follow their own rule (implemented per section, in `schema`).
pub struct Fields;

/// The keys `value` sets at `key`, tables expanded `depth` more levels.
fn set_keys(key: &str, value: &toml::Value, depth: usize, out: &mut Vec<String>) {
    match value {
        // An empty table sets nothing.
        toml::Value::Table(t) if t.is_empty() => {}
        toml::Value::Table(t) if depth > 0 => {
            // By name, whatever order the table keeps.
            let mut entries: Vec<_> = t.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in entries {
                set_keys(&field_key(key, k), v, depth - 1, out);
            }
        }
        _ => out.push(key.to_string()),
    }
}

/// `value` if it does not raise `current`; else `None`, with the key named in `ignored`.
fn lower_only<T: PartialOrd + Display + Copy>(
    key: &str,
    value: Option<T>,
    current: T,
    ignored: &mut Vec<String>,
) -> Option<T> {
    let v = value?;
    if v <= current {
        Some(v)
    } else {
        ignored.push(format!("{key} (raises {current} to {v})"));
        None
    }
}
