//! A PostgreSQL server for the tests of the PostgreSQL fence (`tenure::fence::PgFence`).
//!
//! `TENURE_PG_URL` names it, in either of tokio-postgres's forms (`host=/dir port=N
//! user=U dbname=D` or `postgresql://…`): `scripts/pg.sh start` makes a throwaway one
//! and prints the line to export, and `scripts/pg.sh run CMD…` runs one command with it
//! set. Without it the tests skip, unless `TENURE_PG_REQUIRE=1` (which `.ci/run` sets)
//! makes that a failure. Each test takes a schema of its own ([`TestDb`]), so tests run
//! side by side in one database, and the fence's unqualified `tenure_fence` is the
//! schema's.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use tenure::fence::tokio_postgres::{self, Client, Config, NoTls};
use tokio::task::JoinHandle;

/// `Some(reason)` if there is no server to test against.
pub fn skip_reason() -> Option<String> {
    match std::env::var("TENURE_PG_URL") {
        Ok(url) if !url.trim().is_empty() => None,
        _ => Some(
            "no PostgreSQL server: TENURE_PG_URL is not set (`scripts/pg.sh run cargo test \
             --test election fence_pg` starts a throwaway one)"
                .into(),
        ),
    }
}

/// Whether the PostgreSQL tests must run (`TENURE_PG_REQUIRE=1`).
pub fn required() -> bool {
    std::env::var("TENURE_PG_REQUIRE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `Some(reason)` if a test should skip: no server, and none is required. Panics, naming
/// the reason, if one is required.
pub fn skip_test() -> Option<String> {
    let reason = skip_reason()?;
    assert!(
        !required(),
        "a PostgreSQL server is required (TENURE_PG_REQUIRE) but {reason}"
    );
    eprintln!("skipped: {reason} (TENURE_PG_REQUIRE=1 makes this a failure)");
    Some(reason)
}

/// The server's connection settings, from `TENURE_PG_URL`. Panics with the parse error
/// (which never includes the password).
pub fn config() -> Config {
    let url = std::env::var("TENURE_PG_URL").expect("TENURE_PG_URL is set");
    Config::from_str(&url).unwrap_or_else(|e| panic!("TENURE_PG_URL does not parse: {e}"))
}

/// One connection: the client, and the task driving its socket, whose result is what
/// the server said when it ended the session (`Err` with the server's FATAL error).
pub struct Conn {
    /// The client.
    pub client: Client,
    /// The connection's task.
    pub connection: JoinHandle<Result<(), tokio_postgres::Error>>,
}

/// A schema of a test's own in the test server; its connections have it as their
/// `search_path`.
pub struct TestDb {
    config: Config,
    schema: String,
}

impl TestDb {
    /// Creates the schema `tenure_test_<label>_<pid>_<n>`.
    pub async fn new(label: &str) -> TestDb {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        let schema = format!(
            "tenure_test_{label}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let base = config();
        let admin = connect(&base).await;
        admin
            .client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            ))
            .await
            .unwrap_or_else(|e| panic!("creating the schema {schema}: {e:?}"));
        let mut config = base;
        config.options(format!("-c search_path={schema}"));
        TestDb { config, schema }
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A `postgresql://` URL of the schema, for `tenure-worker --ledger` (which takes the
    /// URL form): the server's host (a Unix socket folder or a name), port, user and
    /// database, and the schema as the session's `search_path`. No password: the test
    /// server trusts local connections.
    pub fn url(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            None => "localhost".to_string(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "postgresql://{}@{}:{port}/{}?options={}",
            encode(self.config.get_user().unwrap_or("postgres")),
            encode(&host),
            encode(self.config.get_dbname().unwrap_or("postgres")),
            encode(&format!("-c search_path={}", self.schema))
        )
    }

    /// A new connection in the schema.
    pub async fn connect(&self) -> Conn {
        connect(&self.config).await
    }

    /// A new client in the schema, its connection driven in the background.
    pub async fn client(&self) -> Client {
        self.connect().await.client
    }

    /// Drops the schema and everything in it (a passing test's last step; a failing
    /// test leaves it to look at).
    pub async fn drop_schema(self) {
        let admin = connect(&config()).await;
        admin
            .client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .unwrap_or_else(|e| panic!("dropping the schema {}: {e:?}", self.schema));
    }
}

async fn connect(config: &Config) -> Conn {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to TENURE_PG_URL's server: {e:?}"));
    let connection = tokio::spawn(connection);
    Conn { client, connection }
}

/// Percent-encodes everything but unreserved characters, for a URL's parts.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
