//! Connection strings without their secrets, for logs, errors and `settings/get`.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

use super::model::REDACTED;

/// A database connection URL: `Debug` and `Serialize` show it with the password as `***`.
#[derive(Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        DatabaseUrl(url.into())
    }

    /// The URL with its password, for the one place that connects.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl Serialize for DatabaseUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&redact_url(&self.0))
    }
}

/// `url` with its password replaced by `***`: the `user:password@` part of a
/// `postgres://`/`postgresql://` URL, and `password=…` in a `key=value` string or a URL query.
pub fn redact_url(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, tail) = match rest.find(['/', '?']) {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{user}:***@{host}"),
                    None => authority.to_owned(),
                },
                None => authority.to_owned(),
            };
            format!("{scheme}://{authority}{tail}")
        }
        None => url.to_owned(),
    };
    // `password=secret` in a key=value string or a query; quoted values may hold spaces.
    let mut searched = 0;
    while let Some(found) = out[searched..].find("password=") {
        let start = searched + found + "password=".len();
        let rest = &out[start..];
        let end = if let Some(quoted) = rest.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let hit = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                hit
            });
            start + close.map_or(rest.len(), |(i, _)| i + 2)
        } else {
            start + rest.find([' ', '&']).unwrap_or(rest.len())
        };
        out.replace_range(start..end, "***");
        searched = start + 3;
    }
    out
}

/// `url` (a provider's `baseUrl`) with any credentials in it replaced by `***`: the whole
/// userinfo (`https://user:secret@host` → `https://user:***@host`, `https://token@host` →
/// `https://***@host`) and the values of query parameters whose name suggests a secret
/// (`key`, `api_key`, `token`, `secret`, `password`, `auth`, `sig`, …).
pub fn redact_url_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("***@{host}"),
        },
        None => authority.to_owned(),
    };
    let (before_fragment, fragment) = match tail.find('#') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    let tail = match before_fragment.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((name, value)) if !value.is_empty() && is_secret_param(name) => {
                        format!("{name}={REDACTED}")
                    }
                    _ => param.to_owned(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => before_fragment.to_owned(),
    };
    format!("{scheme}://{authority}{tail}{fragment}")
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "sig",
        "credential",
    ]
    .iter()
    .any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn base_url_credentials_are_hidden() {
        use super::redact_url_credentials as r;
        assert_eq!(
            r("https://user:s3cret@llm.example/v1?key=abc&model=x#f"),
            "https://user:***@llm.example/v1?key=***&model=x#f"
        );
        assert_eq!(r("https://sk-token@llm.example"), "https://***@llm.example");
        assert_eq!(
            r("http://127.0.0.1:8080/v1?api_key=k1&X-Goog-Api-Key=k2&access_token=t"),
            "http://127.0.0.1:8080/v1?api_key=***&X-Goog-Api-Key=***&access_token=***"
        );
        // Nothing secret: unchanged (a port is not a password).
        for url in [
            "http://127.0.0.1:8080/v1",
            "https://api.openai.com/v1?model=x",
            "not a url",
        ] {
            assert_eq!(r(url), url);
        }
    }

    #[test]
    fn passwords_are_hidden_in_every_form() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db.example:5432/app"),
            "postgres://bob:***@db.example:5432/app"
        );
        assert_eq!(
            redact_url("postgresql://bob:p%40ss@[::1]/app?sslmode=disable"),
            "postgresql://bob:***@[::1]/app?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://bob@localhost/app?password=hunter2&x=1"),
            "postgres://bob@localhost/app?password=***&x=1"
        );
        assert_eq!(
            redact_url("host=/tmp user=bob password='a b\\' c' dbname=app"),
            "host=/tmp user=bob password=*** dbname=app"
        );
        assert_eq!(
            redact_url("host=/tmp password=plain dbname=app"),
            "host=/tmp password=*** dbname=app"
        );
        assert_eq!(
            redact_url("postgres:///app?host=/run/pg"),
            "postgres:///app?host=/run/pg"
        );
        for url in [
            "postgres://bob:s3cret@db.example:5432/app",
            "host=/tmp user=bob password='a b\\' c' dbname=app",
        ] {
            let shown = redact_url(url);
            assert!(
                !shown.contains("s3cret") && !shown.contains("a b"),
                "{shown}"
            );
        }
    }
}
