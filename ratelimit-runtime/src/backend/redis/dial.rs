//! Dialling one server: TCP with keepalive (TLS over it for the `rediss…://` forms) or a Unix
//! socket, then the connection's setup (AUTH, SELECT), all within the connect timeout.

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{AsyncStream, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, RedisConnectionInfo,
    RedisError, RedisResult, Value,
};
use socket2::{SockRef, TcpKeepalive};

use super::breaker::Breaker;
use super::config::RedisConfig;
use super::failure::Failure;
#[cfg(feature = "tls")]
use super::tls::Tls;
use super::write_counter::WriteCounter;

/// How long one connection attempt (connect, TLS, AUTH, SELECT) may take unless the
/// check timeout is shorter.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// TCP keepalive probes start after this much silence, and the kernel drops a connection
/// whose written data has gone unacknowledged for [`USER_TIMEOUT`].
const KEEPALIVE: Duration = Duration::from_secs(5);
const USER_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach one server.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub info: ConnectionInfo,
    pub options: Arc<Options>,
}

/// What every server and connection of a backend shares, from its configuration.
pub(super) struct Options {
    /// How long one connection attempt may take.
    connect_timeout: Duration,
    /// Each server's breaker.
    pub breaker: Breaker,
    /// Set for the `rediss…://` forms.
    #[cfg(feature = "tls")]
    tls: Option<Tls>,
}

/// A new connection: the handle, its driver (which must be polled for the connection to
/// work), and the count of its socket's writes.
pub(super) struct Dialled {
    pub connection: MultiplexedConnection,
    pub driver: Driver,
    pub writes: Arc<AtomicU64>,
}

/// A connection's driver: it must be polled for the connection to work.
pub(super) type Driver = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Endpoint {
    /// The server at `host:port` that a topology found (a Cluster's node, the master the
    /// sentinels name), reached as this one is (credentials, database, TLS).
    pub(super) fn at(&self, host: &str, port: u16) -> Endpoint {
        Endpoint {
            info: (self.info.clone()).set_addr(ConnectionAddr::Tcp(host.to_owned(), port)),
            options: self.options.clone(),
        }
    }

    /// This server with other credentials and database.
    pub(super) fn with_settings(&self, settings: RedisConnectionInfo) -> Endpoint {
        Endpoint {
            info: self.info.clone().set_redis_settings(settings),
            options: self.options.clone(),
        }
    }

    /// Connects (TCP with keepalive, TLS when configured, or a Unix socket) and sets the
    /// connection up (AUTH, SELECT), within the connect timeout. Any failure is
    /// [`Failure::Unreachable`]: nothing was sent.
    pub(super) async fn connect(&self) -> Result<Dialled, Failure> {
        self.dial().await.map_err(Failure::Unreachable)
    }

    async fn dial(&self) -> RedisResult<Dialled> {
        let timeout = self.options.connect_timeout;
        let connecting = async {
            let writes = Arc::new(AtomicU64::new(0));
            let stream = WriteCounter::new(self.stream().await?, writes.clone());
            // Answers are timed by the limiter.
            let config = AsyncConnectionConfig::new().set_response_timeout(None);
            let (connection, driver) =
                MultiplexedConnection::new_with_config(self.info.redis_settings(), stream, config)
                    .await?;
            Ok(Dialled {
                connection,
                driver: Box::pin(driver),
                writes,
            })
        };
        tokio::time::timeout(timeout, connecting)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    /// Sends one command on a connection of its own, closed after the reply: for the rare
    /// questions to sentinels and seed nodes.
    pub(super) async fn query_once(&self, command: &Cmd) -> Result<Value, Failure> {
        let Dialled {
            mut connection,
            driver,
            ..
        } = self.connect().await?;
        let driver = tokio::spawn(driver);
        let reply = tokio::time::timeout(
            self.options.connect_timeout,
            connection.send_packed_command(command),
        )
        .await;
        driver.abort();
        let reply = reply
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
        Failure::from_reply(reply.map_err(Failure::Unreachable)?)
    }

    /// A pub/sub connection, driven on the current runtime.
    pub(super) async fn subscriber(&self) -> RedisResult<redis::aio::PubSub> {
        let timeout = self.options.connect_timeout;
        let subscribing = async {
            redis::aio::PubSub::new(self.info.redis_settings(), self.stream().await?).await
        };
        tokio::time::timeout(timeout, subscribing)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    async fn stream(&self) -> RedisResult<Pin<Box<dyn AsyncStream + Send + Sync>>> {
        Ok(match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                detect_dead_peers(&tcp)?;
                #[cfg(feature = "tls")]
                if let Some(tls) = &self.options.tls {
                    return Ok(Box::pin(tls.handshake(host, tcp).await?));
                }
                Box::pin(tcp)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Box::pin(tokio::net::UnixStream::connect(path).await?),
            // Not made by `target::parse`.
            _ => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "this kind of Redis address is not supported",
                )))
            }
        })
    }
}

impl Options {
    pub fn new(config: &RedisConfig) -> Options {
        Options {
            // A connect never outlasts the check that waits for it.
            connect_timeout: config
                .timeout
                .clamp(Duration::from_millis(1), CONNECT_TIMEOUT),
            breaker: config.breaker,
            #[cfg(feature = "tls")]
            tls: config.tls.clone(),
        }
    }
}

/// Keepalive probes and a user timeout, so that a peer that vanished without closing (a
/// crashed host, a dropped route) is found out in seconds even while no call is waiting.
fn detect_dead_peers(tcp: &tokio::net::TcpStream) -> std::io::Result<()> {
    let socket = SockRef::from(tcp);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE)
        .with_interval(KEEPALIVE / 2);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    let keepalive = keepalive.with_retries(3);
    socket.set_tcp_keepalive(&keepalive)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}
