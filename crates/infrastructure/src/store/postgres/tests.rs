//! The schema against a real PostgreSQL server: the one `AWR_TEST_POSTGRES`
//! names (`cargo xtask test` starts a throwaway one), a database of its own
//! per test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// A fresh database on the test server, as a URL; `None` (saying why) on a
/// machine with no server, unless `AWR_REQUIRE_POSTGRES` says there must be
/// one (CI), where its absence fails the test.
async fn fresh_database() -> Option<String> {
    let Ok(base) = std::env::var("AWR_TEST_POSTGRES") else {
        assert!(
            std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
            "AWR_REQUIRE_POSTGRES is set but AWR_TEST_POSTGRES names no server"
        );
        eprintln!(
            "skipped: no PostgreSQL server (set AWR_TEST_POSTGRES, as `cargo xtask test` does)"
        );
        return None;
    };
    let (client, connection) = tokio_postgres::connect(&base, NoTls).await.unwrap();
    tokio::spawn(connection);
    let name = format!("awr_t_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (server, _) = base.rsplit_once('/').expect("a postgres:// URL");
    Some(format!("{server}/{name}"))
}

async fn tables(database: &PgDatabase) -> Vec<String> {
    let client = database.client().await.unwrap();
    client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public' ORDER BY table_name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_new_database_is_migrated_and_opening_it_again_changes_nothing() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let first = PgDatabase::open(&url).await.unwrap();
    assert_eq!(first.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    assert_eq!(
        tables(&first).await,
        ["awr_events", "awr_runs", "awr_schema"]
    );
    let again = PgDatabase::open(&url).await.unwrap();
    assert_eq!(again.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    let client = again.client().await.unwrap();
    let rows: i64 = client
        .query_one("SELECT count(*) FROM awr_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn processes_that_open_one_new_database_at_once_all_succeed() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let opens = (0..4).map(|_| PgDatabase::open(&url));
    for opened in futures::future::join_all(opens).await {
        let database = opened.unwrap();
        assert_eq!(database.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    }
}

#[tokio::test]
async fn a_database_of_a_newer_awr_is_refused_naming_both_versions() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let database = PgDatabase::open(&url).await.unwrap();
    let client = database.client().await.unwrap();
    client
        .execute("UPDATE awr_schema SET version = 99", &[])
        .await
        .unwrap();
    let refused = PgDatabase::open(&url).await.unwrap_err();
    assert!(
        matches!(
            refused,
            PgOpenError::Newer {
                found: 99,
                known: PG_SCHEMA_VERSION
            }
        ),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(text.contains("99") && text.contains("newer"), "{text}");
}

#[tokio::test]
async fn a_bad_url_and_an_absent_server_are_named_without_the_password() {
    let bad = PgDatabase::open("postgres://me@host:port/db")
        .await
        .unwrap_err();
    assert!(matches!(bad, PgOpenError::BadUrl(_)), "{bad:?}");
    // Nothing listens on port 1 of the loopback.
    let absent = PgDatabase::open("postgres://me:secret@127.0.0.1:1/teamdb?connect_timeout=5")
        .await
        .unwrap_err();
    let text = absent.to_string();
    assert!(matches!(absent, PgOpenError::Connect { .. }), "{absent:?}");
    assert!(text.contains("127.0.0.1:1/teamdb"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}
