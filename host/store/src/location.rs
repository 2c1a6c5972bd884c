//! A PostgreSQL store's URL (what a `postgres://…` store URL parses into). It carries a
//! password: kept only inside [`PgUrl`], whose `Display` and `Debug` show it as `***`, and
//! [`PgUrl::scrub`] removes it from any text (a driver's error message) before that text is
//! shown or stored.

use super::error::StoreError;

/// A PostgreSQL URL whose password never shows.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    url: String,
    redacted: String,
    secrets: Vec<String>,
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
pub(crate) fn redact(url: &str) -> (String, Vec<String>) {
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
