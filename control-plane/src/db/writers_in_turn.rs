//! SQLite's writers take turns in the order they came (`Db::begin_write`): each begins
//! once the one before it has ended, so none meets the write lock held and sleeps in
//! SQLite's busy handler. With the busy handler off, a writer that met the lock held
//! would fail at once; here twenty queued behind a held transaction all succeed, in
//! order.

use super::Db;

#[tokio::test]
async fn sqlite_writers_take_turns_in_the_order_they_came() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("turns.db").display());
    let db = Db::connect(&url, 4).await.unwrap();
    sqlx::query("CREATE TABLE turns (id INTEGER PRIMARY KEY, writer BIGINT NOT NULL)")
        .execute(db.pool())
        .await
        .unwrap();
    // Every connection of the pool (4 held at once), without a busy handler.
    let mut connections = Vec::new();
    for _ in 0..4 {
        connections.push(db.pool().acquire().await.unwrap());
    }
    for connection in &mut connections {
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut **connection)
            .await
            .unwrap();
    }
    drop(connections);

    let first = db.begin_write().await.unwrap();
    let mut writers = Vec::new();
    for writer in 0..20_i64 {
        let db = db.clone();
        writers.push(tokio::spawn(async move {
            let mut tx = db.begin_write().await?;
            sqlx::query("INSERT INTO turns (writer) VALUES ($1)")
                .bind(writer)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        }));
        // Let it come to the queue before the next one starts.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
    }
    first.commit().await.unwrap();
    for writer in writers {
        writer.await.unwrap().unwrap();
    }
    let order: Vec<i64> = sqlx::query_scalar("SELECT writer FROM turns ORDER BY id")
        .fetch_all(db.pool())
        .await
        .unwrap();
    assert_eq!(order, (0..20).collect::<Vec<_>>());
}
