//! A web service whose deposits run under a per-account lock taken by distlock's
//! tower layer, and write the account through a fenced PostgreSQL table: the service's
//! own table, in the service's own transaction, on the service's own pool (which the
//! lock backend shares).
//!
//! A deposit reads the balance, works a little, and writes the new balance back: a
//! read-modify-write that loses money when two handlers run it at once. Under the
//! account's lock they run one at a time; and the write carries the lock's fence
//! (the `Held` extractor), so that a handler whose lease ran out under it (a pause
//! longer than the TTL) is refused by the table itself. A deposit that committed is
//! answered 200 even if the lock's release then finds the lease gone: the money is in,
//! and a client that retried would deposit it twice. Errors answer as distlock's
//! `IntoResponse` gives them (a stale fence 409, a wait that ran out 423 with
//! `Retry-After`, a backend that cannot be reached 503).
//!
//! The example serves on a free port, sends 20 deposits to one account at once (each
//! retried until it is answered 200, as a client would), and checks that the balance
//! counts each exactly once.
//!
//! Run it against a PostgreSQL (`tests/examples.rs` runs it in CI, and again with the
//! lease deleted behind every deposit after it commits):
//!
//! ```sh
//! DATABASE_URL=postgres://postgres:secret@127.0.0.1:5432/postgres cargo run -p distlock --features postgres,axum --example web_service
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use distlock::postgres::fenced::{self, FencedTable};
use distlock::postgres::sqlx::{self, PgPool, Row};
use distlock::postgres::{PostgresBackend, PostgresConfig};
use distlock::tower::{path_param, Acquire, Held, LockLayer};
use distlock::LockClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What every handler shares.
pub(crate) struct App {
    pool: PgPool,
    accounts: FencedTable,
}

/// What a handler fails with: the lock's errors answer as distlock says; the
/// database's, 503.
enum Failure {
    Lock(distlock::Error),
    Database(sqlx::Error),
}

impl From<distlock::Error> for Failure {
    fn from(error: distlock::Error) -> Self {
        Failure::Lock(error)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        Failure::Database(error)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Failure::Lock(error) => error.into_response(),
            Failure::Database(error) => {
                (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response()
            }
        }
    }
}

/// `POST /accounts/{id}/deposit/{amount}`, under the account's lock.
async fn deposit(
    State(app): State<Arc<App>>,
    held: Held,
    Path((id, amount)): Path<(i64, i64)>,
) -> Result<String, Failure> {
    let mut tx = app.pool.begin().await?;
    let balance: i64 = sqlx::query("SELECT balance FROM accounts WHERE id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?
        .get(0);
    tokio::time::sleep(Duration::from_millis(10)).await; // the handler's work
                                                         // The fence is $1; the table refuses it if a newer holder has written.
    let update = app.accounts.update("balance = $2", "id = $3");
    let query = sqlx::query(&update)
        .bind(fenced::fence_arg(held.fence())?)
        .bind(balance + amount)
        .bind(id);
    fenced::execute(query, &mut *tx).await?;
    tx.commit().await?;
    Ok(format!("{}\n", balance + amount))
}

/// The lock a request runs under: its account's, the route's `{id}`.
fn account_key(request: &Request) -> Option<String> {
    path_param(request, "id").map(|id| format!("accounts/{id}"))
}

/// The service's routes, without the lock.
pub(crate) fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/accounts/{id}/deposit/{amount}", post(deposit))
        .with_state(app)
}

/// The layer that runs each deposit under its account's lock, waiting up to 30 s.
pub(crate) fn lock_layer(locks: LockClient) -> LockLayer<fn(&Request) -> Option<String>> {
    LockLayer::new(locks, Acquire::Wait(Duration::from_secs(30)), account_key)
}

/// The service on `url`'s database: its pool, the shared state, and the lock client
/// on the same pool. Account 7 starts at 0.
pub(crate) async fn open(url: &str) -> Result<(PgPool, Arc<App>, LockClient), BoxError> {
    let pool = PgPool::connect(url).await?;
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
        pool: pool.clone(),
        accounts,
    });
    Ok((pool, app, LockClient::new(Arc::new(backend))))
}

/// Serves `router` on a free port of the loopback interface.
pub(crate) async fn serve(router: Router) -> Result<std::net::SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}

/// `count` deposits of 1 to account 7, all at once, each sent again until it is
/// answered 200 (as a client retries a failed request): the requests sent.
pub(crate) async fn deposit_all(
    address: std::net::SocketAddr,
    count: usize,
) -> Result<usize, BoxError> {
    let clients: Vec<_> = (0..count)
        .map(|_| {
            tokio::spawn(async move {
                for sent in 1..=5 {
                    let answer = post_to(address, "/accounts/7/deposit/1").await?;
                    if answer.starts_with("HTTP/1.1 200") {
                        return Ok::<usize, BoxError>(sent);
                    }
                    println!(
                        "a deposit was answered {}",
                        answer.lines().next().unwrap_or("")
                    );
                }
                Err("a deposit was refused five times".into())
            })
        })
        .collect();
    let mut sent = 0;
    for client in clients {
        sent += client.await??;
    }
    Ok(sent)
}

/// Account 7's balance.
pub(crate) async fn balance(pool: &PgPool) -> Result<i64, BoxError> {
    let row = sqlx::query("SELECT balance FROM accounts WHERE id = 7")
        .fetch_one(pool)
        .await?;
    Ok(row.get(0))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
pub(crate) async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let (pool, app, locks) = open(&url).await?;
    let address = serve(routes(app).layer(lock_layer(locks))).await?;
    println!("serving on http://{address}");

    let sent = deposit_all(address, 20).await?;
    let balance = balance(&pool).await?;
    println!("20 concurrent deposits of 1 ({sent} requests): the balance is {balance}");
    if balance != 20 {
        return Err(format!("the balance is {balance}, not 20").into());
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
