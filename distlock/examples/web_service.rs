//! A web service whose request handler takes a per-account lock and writes the
//! account through a fenced PostgreSQL table: the service's own table, in the
//! service's own transaction, on the service's own pool (which the lock backend
//! shares).
//!
//! A deposit reads the balance, works a little, and writes the new balance back: a
//! read-modify-write that loses money when two handlers run it at once. Under the
//! account's lock they run one at a time; and the write carries the lock's fence, so
//! that a handler whose lease ran out under it (a pause longer than the TTL) is
//! refused by the table itself. The example serves on a free port, sends 20 deposits
//! to one account at once, and checks that every one of them counted.
//!
//! Run it against a PostgreSQL (`tests/examples.rs` runs it in CI):
//!
//! ```sh
//! DATABASE_URL=postgres://postgres:secret@127.0.0.1:5432/postgres cargo run -p distlock --features postgres --example web_service
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use distlock::postgres::fenced::{self, FencedTable};
use distlock::postgres::sqlx::{self, PgPool, Row};
use distlock::postgres::{PostgresBackend, PostgresConfig};
use distlock::LockClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What every handler shares.
struct App {
    locks: LockClient,
    pool: PgPool,
    accounts: FencedTable,
}

/// An error as the handler answers it.
fn failed(e: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// `POST /accounts/{id}/deposit/{amount}`.
async fn deposit(
    State(app): State<Arc<App>>,
    Path((id, amount)): Path<(i64, i64)>,
) -> Result<String, (StatusCode, String)> {
    let guard = app
        .locks
        .lock(&format!("accounts/{id}"), Duration::from_secs(30))
        .await
        .map_err(failed)?;
    let fence = guard.fence();
    let mut tx = app.pool.begin().await.map_err(failed)?;
    let balance: i64 = sqlx::query("SELECT balance FROM accounts WHERE id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(failed)?
        .get(0);
    tokio::time::sleep(Duration::from_millis(10)).await; // the handler's work
                                                         // The fence is $1; the table refuses it if a newer holder has written.
    let update = app.accounts.update("balance = $2", "id = $3");
    let query = sqlx::query(&update)
        .bind(fenced::fence_arg(fence).map_err(failed)?)
        .bind(balance + amount)
        .bind(id);
    fenced::execute(query, &mut *tx).await.map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    guard.release().await.map_err(failed)?;
    Ok(format!("{}\n", balance + amount))
}

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    // The service's pool, shared by its queries and its locks.
    let pool = PgPool::connect(&url).await?;
    let backend = PostgresBackend::from_pool(pool.clone(), PostgresConfig::default()).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)",
    )
    .execute(&pool)
    .await?;
    sqlx::query("INSERT INTO accounts VALUES (7, 0) ON CONFLICT (id) DO UPDATE SET balance = 0")
        .execute(&pool)
        .await?;
    let accounts = FencedTable::new("accounts")?;
    accounts.migrate(&mut *pool.acquire().await?).await?;
    let app = Arc::new(App {
        locks: LockClient::new(Arc::new(backend)),
        pool: pool.clone(),
        accounts,
    });
    let router = Router::new()
        .route("/accounts/{id}/deposit/{amount}", post(deposit))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    println!("serving on http://{address}");

    // Twenty deposits of 1 to account 7, all at once.
    let requests: Vec<_> = (0..20)
        .map(|_| tokio::spawn(post_to(address, "/accounts/7/deposit/1")))
        .collect();
    for request in requests {
        let answer = request.await??;
        if !answer.starts_with("HTTP/1.1 200") {
            return Err(format!("a deposit failed: {answer}").into());
        }
    }
    let balance: i64 = sqlx::query("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(&pool)
        .await?
        .get(0);
    println!("20 concurrent deposits of 1: the balance is {balance}");
    if balance != 20 {
        return Err(format!("deposits were lost: the balance is {balance}, not 20").into());
    }
    Ok(())
}

/// One `POST` with an empty body; the whole answer, as text.
async fn post_to(address: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}
