//! PostgreSQL, the store a team shares: its connection pool and schema
//! ([`PgDatabase`]), and the [`PgRunStore`] on it, whose leases the queue
//! and the workers build on (`migrations/`).

mod control;
mod lease;
mod log;
mod presence;
mod queue;
mod schema;
mod shared;
mod store;
mod transcript;
mod transcript_files;
mod whole;

#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transcript_tests;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;

pub use control::{PgControl, PgControlOn};
pub use schema::PG_SCHEMA_VERSION;
pub use shared::PgStoreConfig;
pub use store::PgRunStore;
pub use transcript::{PgTranscripts, PgTranscriptsOn};

/// Connections a process keeps open to the database at most.
const POOL_SIZE: usize = 16;

/// How long a connection may take to open when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a PostgreSQL database could not be opened as a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgOpenError {
    /// The URL is not one PostgreSQL takes (`postgres://USER@HOST:PORT/DB`).
    #[error("not a PostgreSQL URL ({0}): expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")]
    BadUrl(String),
    /// No connection could be made.
    #[error("cannot connect to PostgreSQL at {target}: {source}")]
    Connect {
        /// Host, port and database (never the password).
        target: String,
        /// Why.
        #[source]
        source: deadpool_postgres::PoolError,
    },
    /// A statement failed.
    #[error("PostgreSQL: cannot {what}: {source}")]
    Sql {
        /// What was being done.
        what: &'static str,
        /// Why, as the server or the client said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database was written by a newer awr.
    #[error(
        "the PostgreSQL database has schema version {found}, newer than this awr knows \
         ({known}); use a newer awr"
    )]
    Newer {
        /// The version in `awr_schema`.
        found: i32,
        /// [`PG_SCHEMA_VERSION`].
        known: i32,
    },
    /// The database holds no awr store, and the command only reads.
    #[error("the PostgreSQL database {0} holds no awr runs (no awr schema)")]
    NoStore(String),
    /// The pool could not be built.
    #[error("cannot set up the PostgreSQL connection pool: {0}")]
    Pool(String),
}

/// A PostgreSQL database opened as awr's store: a pool of connections to
/// it, its schema brought up to date.
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool,
    /// Where it connects, for the connections a pool cannot lend (a session
    /// that holds a lock or listens).
    config: tokio_postgres::Config,
    target: String,
}

impl std::fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDatabase")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl PgDatabase {
    /// Opens the database at `url` (`postgres://…`, or PostgreSQL's
    /// `key=value` form) and migrates its schema; fails, naming the host
    /// and database but never the password, when it cannot.
    pub async fn open(url: &str) -> Result<Self, PgOpenError> {
        Self::connect(url, true).await
    }

    /// Opens the database at `url` for commands that only read: fails,
    /// naming it, when it holds no awr store, rather than making one.
    pub async fn open_existing(url: &str) -> Result<Self, PgOpenError> {
        Self::connect(url, false).await
    }

    async fn connect(url: &str, create: bool) -> Result<Self, PgOpenError> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| PgOpenError::BadUrl(e.to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // Appends commit without waiting for the server's sync; a flush (a
        // step boundary) waits for one that covers them all, and what must
        // be durable at once (a lease taken, a run deleted or imported)
        // syncs itself. See `PgRunStore`.
        let options = match config.get_options() {
            Some(given) => format!("{given} -c synchronous_commit=off"),
            None => "-c synchronous_commit=off".to_owned(),
        };
        config.options(&options);
        let target = target(&config);
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| PgOpenError::Pool(e.to_string()))?;
        let database = PgDatabase {
            pool,
            config,
            target,
        };
        let mut client = database.client().await?;
        if !create {
            let found: bool = client
                .query_one("SELECT to_regclass('awr_schema') IS NOT NULL", &[])
                .await
                .map_err(|source| PgOpenError::Sql {
                    what: "look for the awr schema",
                    source,
                })?
                .get(0);
            if !found {
                return Err(PgOpenError::NoStore(database.target));
            }
        }
        schema::migrate(&mut client).await?;
        Ok(database)
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<i32, PgOpenError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT version FROM awr_schema", &[])
            .await
            .map_err(|source| PgOpenError::Sql {
                what: "read the schema version",
                source,
            })?;
        Ok(row.get(0))
    }

    /// Where the database is (host, port, database; never the password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// A connection from the pool.
    async fn client(&self) -> Result<deadpool_postgres::Object, PgOpenError> {
        self.pool
            .get()
            .await
            .map_err(|source| PgOpenError::Connect {
                target: self.target.clone(),
                source,
            })
    }
}

/// Where `config` connects, for messages: hosts, port and database, never
/// the password.
fn target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config.get_dbname().unwrap_or("postgres");
    format!("{}:{port}/{database}", hosts.join(","))
}
