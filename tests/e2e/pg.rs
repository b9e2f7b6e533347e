//! The test's PostgreSQL server (`AWR_TEST_POSTGRES`, started by `cargo
//! xtask test`): a fresh database per test, and its rows read from
//! synchronous tests.

use serde_json::Value;

/// The server's URL, or `None` after saying why; fails where the server
/// must be there (`AWR_REQUIRE_POSTGRES`, as in CI).
pub fn server() -> Option<String> {
    match std::env::var("AWR_TEST_POSTGRES") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
                "AWR_REQUIRE_POSTGRES is set but AWR_TEST_POSTGRES names no server"
            );
            eprintln!(
                "skipped: no PostgreSQL server (set AWR_TEST_POSTGRES, as `cargo xtask test` does)"
            );
            None
        }
    }
}

/// Runs `work` on a connection to `url`, on a thread and runtime of its
/// own, so that synchronous and asynchronous tests alike can call it.
fn with_client<T: Send + 'static>(
    url: &str,
    work: impl AsyncFnOnce(&tokio_postgres::Client) -> T + Send + 'static,
) -> T {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to the test server");
            tokio::spawn(connection);
            work(&client).await
        })
    })
    .join()
    .expect("the database thread")
}

/// A fresh database on the server, as a URL; `None` (saying why) when
/// there is no server.
pub fn fresh_database() -> Option<String> {
    let base = server()?;
    let name = format!("awr_e2e_{}", uuid::Uuid::new_v4().simple());
    let create = format!("CREATE DATABASE {name}");
    with_client(&base, async move |client| {
        client
            .batch_execute(&create)
            .await
            .expect("create a database");
    });
    let (server, _) = base.rsplit_once('/').expect("a postgres:// URL");
    Some(format!("{server}/{name}"))
}

/// The text of the first column of `sql`'s rows (`$1` is `run`, if given);
/// none before awr made its schema.
pub fn strings(url: &str, sql: &str, run: Option<&str>) -> Vec<String> {
    let sql = sql.to_owned();
    let run = run.map(str::to_owned);
    with_client(url, async move |client| {
        let rows = match run {
            Some(run) => client.query(&sql, &[&run]).await,
            None => client.query(&sql, &[]).await,
        };
        rows.map(|rows| rows.iter().map(|row| row.get(0)).collect())
            .unwrap_or_default()
    })
}

/// The JSON of a run's events, read from its rows.
pub fn events(url: &str, run: &str) -> Vec<Value> {
    strings(
        url,
        "SELECT body FROM awr_events WHERE run_id::text = $1 ORDER BY \"offset\"",
        Some(run),
    )
    .iter()
    .map(|body| serde_json::from_str(body).expect("an event row"))
    .collect()
}
