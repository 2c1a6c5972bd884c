//! Where a store is: `--store`, `KILN_STORE` or the user's `[store] url`, parsed into an
//! SQLite file or a PostgreSQL URL. A PostgreSQL URL carries a password: it is kept only
//! inside [`PgUrl`], whose `Display` and `Debug` show it as `***`, and [`PgUrl::scrub`] removes
//! it from any text (a driver's error message) before that text is shown or stored.

use super::error::StoreError;
use std::path::PathBuf;

/// A store location.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An SQLite file: `sqlite:PATH`, `sqlite://PATH` or a plain path.
    Sqlite(PathBuf),
    /// A PostgreSQL database: `postgres://…` or `postgresql://…`.
    Postgres(PgUrl),
}

/// A PostgreSQL URL whose password never shows.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    url: String,
    redacted: String,
    secrets: Vec<String>,
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<StoreUrl, StoreError> {
        let s = s.trim();
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return PgUrl::parse(s).map(StoreUrl::Postgres);
        }
        if let Some(rest) = s.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            return non_empty(path, s).map(StoreUrl::Sqlite);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(StoreError::BadUrl {
                url: redact(s).0,
                why: format!(
                    "unknown scheme `{scheme}`; use postgres://USER@HOST/DB, sqlite:PATH or a file path"
                ),
            });
        }
        non_empty(s, s).map(StoreUrl::Sqlite)
    }
}

fn non_empty(path: &str, whole: &str) -> Result<PathBuf, StoreError> {
    if path.is_empty() {
        return Err(StoreError::BadUrl {
            url: whole.to_string(),
            why: "no file named; use sqlite:PATH".into(),
        });
    }
    Ok(PathBuf::from(path))
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            StoreUrl::Postgres(u) => u.fmt(f),
        }
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl({})", self.redacted)
    }
}

impl PgUrl {
    /// Parse and check a `postgres://` URL. TLS is not built in, so `sslmode=require` and
    /// `verify-*` are refused rather than connecting in clear.
    pub fn parse(url: &str) -> Result<PgUrl, StoreError> {
        let (redacted, secrets) = redact(url);
        let pg = PgUrl {
            url: url.to_string(),
            redacted,
            secrets,
        };
        let config = pg.config()?;
        if config.get_ssl_mode() == ::postgres::config::SslMode::Require {
            return Err(pg.bad(NO_TLS));
        }
        if config.get_hosts().is_empty() {
            return Err(pg.bad("no host; use postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"));
        }
        Ok(pg)
    }

    /// The URL as given, password included: only for handing the store to a child kiln
    /// (through its environment), never for showing.
    pub fn secret_url(&self) -> &str {
        &self.url
    }

    /// The driver's configuration.
    pub fn config(&self) -> Result<::postgres::Config, StoreError> {
        let query = self.url.split_once('?').map(|(_, q)| q).unwrap_or("");
        for pair in query.split('&') {
            if let Some(mode) = pair.strip_prefix("sslmode=")
                && !matches!(mode, "disable" | "prefer" | "allow")
            {
                return Err(self.bad(NO_TLS));
            }
        }
        self.url
            .parse::<::postgres::Config>()
            .map_err(|e| self.bad(&self.scrub(&e.to_string())))
    }

    /// `text` with every password of this URL (as written and percent-decoded) replaced by
    /// `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.replace(&self.url, &self.redacted);
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }

    fn bad(&self, why: &str) -> StoreError {
        StoreError::BadUrl {
            url: self.redacted.clone(),
            why: why.to_string(),
        }
    }
}

const NO_TLS: &str = "kiln's PostgreSQL client has no TLS, so it will not connect with sslmode=require or verify-*; use a trusted network or an SSH tunnel with sslmode=disable";

/// The URL with its passwords (in the user part and any `password=` parameter) as `***`,
/// and those passwords (as written and percent-decoded, for scrubbing).
fn redact(url: &str) -> (String, Vec<String>) {
    let mut secrets = Vec::new();
    let mut out = url.to_string();
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@')
            && let Some((user, pass)) = authority[..at].split_once(':')
        {
            secrets.push(pass.to_string());
            out = format!("{scheme}://{user}:***{}", &rest[at..]);
        }
    }
    if let Some((base, query)) = out.clone().split_once('?') {
        let pairs: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("password", v)) => {
                    secrets.push(v.to_string());
                    "password=***".to_string()
                }
                _ => p.to_string(),
            })
            .collect();
        out = format!("{base}?{}", pairs.join("&"));
    }
    let decoded: Vec<String> = secrets.iter().map(|s| percent_decode(s)).collect();
    secrets.extend(decoded);
    secrets.retain(|s| !s.is_empty());
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    (out, secrets)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_to_backends_and_never_show_the_password() {
        let u: StoreUrl = "postgres://kiln:s%40cret@db.example:5433/runs?sslmode=disable"
            .parse()
            .unwrap();
        let StoreUrl::Postgres(pg) = &u else {
            panic!("{u}")
        };
        assert_eq!(
            u.to_string(),
            "postgres://kiln:***@db.example:5433/runs?sslmode=disable"
        );
        assert!(!format!("{u:?}").contains("cret"));
        assert_eq!(
            pg.scrub("password s@cret or s%40cret"),
            "password *** or ***"
        );
        let q: StoreUrl = "postgresql://h/db?user=k&password=hunter2".parse().unwrap();
        assert_eq!(q.to_string(), "postgresql://h/db?user=k&password=***");
        assert_eq!(
            "sqlite:/tmp/k.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite("/tmp/k.db".into())
        );
        assert_eq!(
            "runs.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite("runs.db".into())
        );
        let e = "mysql://u:pw@h/db"
            .parse::<StoreUrl>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown scheme `mysql`") && !e.contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn tls_modes_are_refused_rather_than_connecting_in_clear() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let e = format!("postgres://u:topsecret@h/db?sslmode={mode}")
                .parse::<StoreUrl>()
                .unwrap_err()
                .to_string();
            assert!(e.contains("no TLS"), "{e}");
            assert!(!e.contains("topsecret"), "{e}");
        }
        let e = "postgres://u:pw@/db".parse::<StoreUrl>().unwrap_err();
        assert!(e.to_string().contains("no host"), "{e}");
    }
}
