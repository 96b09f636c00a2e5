//! The listener: TLS, authentication, cancellation, a thread per connection.
//!
//! Each connection is served by a thread of its own with a single-threaded
//! runtime, as PostgreSQL serves each by a process of its own: its messages
//! are read, its statements run (inline, `handler::run_inline`) and its
//! answers written on that one thread. On a shared multi-threaded runtime each
//! statement went to tokio's blocking pool and back, two thread wake-ups that
//! cost a point statement more than its own work (issue 41).

use std::any::Any;
use std::fmt::Debug;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::sink::{Sink, SinkExt};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::{ClientInfo, ConnectionManager, PgWireServerHandlers, METADATA_USER};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::tokio_rustls::rustls::pki_types::pem::PemObject;
use pgwire::tokio::tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use pgwire::tokio::tokio_rustls::rustls::ServerConfig;
use pgwire::tokio::{process_socket, TlsAcceptor};
use tokio::io::unix::AsyncFd;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::cancels::Cancels;
use crate::engine::{Engine, WireError};
use crate::handler::{blocking, run_inline, user_error, Handler};

/// SCRAM's PBKDF2 rounds: PostgreSQL's default, and what stored verifiers use.
pub const SCRAM_ITERATIONS: usize = 4096;
/// The version clients see (drivers parse it to pick protocol features).
const SERVER_VERSION: &str = "16.0";
const TIME_ZONE: &str = "UTC";
const DATE_STYLE: &str = "ISO, MDY";

/// Where connections come from.
pub enum Listen {
    /// Bind this address (port 0: any free port).
    Address(SocketAddr),
    /// A listening socket this process shares with the other workers of one
    /// `veil serve --workers N`, which bound it before starting them.
    Shared(std::net::TcpListener),
}

/// How long a worker holding `n` connections waits, `n` times over (at most
/// [`MAX_STAGGER`] times), once a connection is pending on a shared listening
/// socket, before it tries to accept it. Every worker is woken for each
/// connection; the least busy one tries first and usually takes it, so a
/// burst of connections (pgbench's clients) spreads over the workers instead
/// of going to whichever woke first.
const ACCEPT_STAGGER: Duration = Duration::from_millis(2);
const MAX_STAGGER: u32 = 25;

pub struct Config {
    pub listen: Listen,
    /// PEM certificate chain and private key: TLS offered (and SCRAM channel binding).
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Any user, no password (`--insecure-local`; loopback only, checked by the caller).
    pub trust: bool,
    /// Made when a connection's thread starts and dropped when it ends, after its
    /// session (the engine's per-thread state: a Python thread state).
    pub thread_start: Option<ThreadStart>,
}

/// What a connection's thread holds for its whole life (`Config::thread_start`).
pub type ThreadStart = Arc<dyn Fn() -> Box<dyn Any> + Send + Sync>;

/// How long `serve` waits, once stopped, for its connections' threads to end.
const STOP_WAIT: Duration = Duration::from_secs(5);

struct Verifiers(Arc<dyn Engine>);

impl Debug for Verifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifiers")
    }
}

#[async_trait]
impl AuthSource for Verifiers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default().to_owned();
        let engine = self.0.clone();
        let name = user.clone();
        match blocking(move || engine.verifier(&name)).await? {
            Some(v) => Ok(Password::new(Some(v.salt), v.salted_password)),
            None => Err(bad_password(&user)),
        }
    }
}

/// PostgreSQL's refusal of a login, naming the user of the startup packet.
fn bad_password(user: &str) -> PgWireError {
    user_error(WireError::new(
        "28P01",
        format!("password authentication failed for user \"{user}\""),
    ))
}

fn parameters() -> Arc<DefaultServerParameterProvider> {
    let mut p = DefaultServerParameterProvider::default();
    p.server_version = SERVER_VERSION.to_owned();
    // what SHOW answers before a SET (veil.serve.engine's defaults)
    p.time_zone = TIME_ZONE.to_owned();
    p.date_style = DATE_STYLE.to_owned();
    p.is_superuser = false;
    Arc::new(p)
}

struct Trust(Arc<ConnectionManager>);

#[async_trait]
impl NoopStartupHandler for Trust {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.0.clone())
    }

    /// pgwire's trust handshake announces its own defaults; these follow them
    /// and win (clients keep the last value of each parameter).
    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        for (name, value) in [
            ("server_version", SERVER_VERSION),
            ("is_superuser", "off"),
            ("TimeZone", TIME_ZONE),
            ("DateStyle", DATE_STYLE),
        ] {
            let status = ParameterStatus::new(name.to_owned(), value.to_owned());
            client
                .send(PgWireBackendMessage::ParameterStatus(status))
                .await?;
        }
        Ok(())
    }
}

/// Trust (`--insecure-local`) or SCRAM-SHA-256, fixed when the server starts.
enum Startup {
    Trust(Trust),
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Trust(t) => t.on_startup(client, message).await,
            // pgwire names the user of SCRAM's first message, which libpq leaves empty
            // (PostgreSQL reads the startup packet's): a wrong password said `user ""`.
            Startup::Scram(s) => s.on_startup(client, message).await.map_err(|e| match e {
                PgWireError::InvalidPassword(_) => bad_password(
                    client
                        .metadata()
                        .get(METADATA_USER)
                        .map_or("", String::as_str),
                ),
                other => other,
            }),
        }
    }
}

struct Handlers {
    handler: Arc<Handler>,
    startup: Arc<Startup>,
    cancel: Arc<CancelRoute>,
}

/// A cancel request: to the connection's running statement (`cancels`) and to pgwire,
/// which drops the statement's future where one is awaited.
struct CancelRoute {
    cancels: Arc<Cancels>,
    pgwire: DefaultCancelHandler,
}

#[async_trait]
impl CancelHandler for CancelRoute {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.cancels
            .cancel(request.pid, request.secret_key.to_bytes());
        self.pgwire.on_cancel_request(request).await;
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsAcceptor, WireError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| WireError::new("08000", format!("cannot read the TLS certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| WireError::new("08000", format!("cannot read the TLS private key: {e}")))?;
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| WireError::new("08000", format!("unusable TLS certificate or key: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn handlers(engine: Arc<dyn Engine>, config: &Config) -> Result<Handlers, WireError> {
    let manager = Arc::new(ConnectionManager::new());
    let startup = if config.trust {
        Startup::Trust(Trust(manager.clone()))
    } else {
        let mut scram = ScramAuth::new(Arc::new(Verifiers(engine.clone())));
        scram.set_iterations(SCRAM_ITERATIONS);
        if let Some((cert, _)) = &config.tls {
            scram
                .configure_certificate(cert)
                .map_err(|e| WireError::new("08000", format!("TLS certificate: {e}")))?;
        }
        Startup::Scram(
            SASLAuthStartupHandler::new(parameters())
                .with_scram(scram)
                .with_connection_manager(manager.clone()),
        )
    };
    let handler = Handler::new(engine);
    let cancel = CancelRoute {
        cancels: handler.cancels.clone(),
        pgwire: DefaultCancelHandler::new(manager),
    };
    Ok(Handlers {
        handler: Arc::new(handler),
        startup: Arc::new(startup),
        cancel: Arc::new(cancel),
    })
}

/// A bound listening socket: this process's own, or shared with other workers.
enum Listener {
    Own(TcpListener),
    Shared(AsyncFd<std::net::TcpListener>),
}

impl Listener {
    async fn open(listen: Listen) -> io::Result<Listener> {
        Ok(match listen {
            Listen::Address(address) => Listener::Own(TcpListener::bind(address).await?),
            Listen::Shared(socket) => {
                socket.set_nonblocking(true)?;
                // SAFETY: the listener owns its descriptor, and nothing replaces or closes
                // it while the `AsyncFd` holds it (it is dropped with the `AsyncFd`).
                Listener::Shared(unsafe { AsyncFd::register(socket)? })
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Own(l) => l.local_addr(),
            Listener::Shared(l) => l.get_ref().local_addr(),
        }
    }

    /// The next connection; `open`: how many this process serves now.
    async fn accept(&self, open: &AtomicUsize) -> io::Result<TcpStream> {
        let shared = match self {
            Listener::Own(l) => return l.accept().await.map(|(socket, _)| socket),
            Listener::Shared(l) => l,
        };
        loop {
            let mut pending = shared.readable().await?;
            let busy = u32::try_from(open.load(Ordering::Relaxed)).unwrap_or(MAX_STAGGER);
            if busy > 0 {
                tokio::time::sleep(ACCEPT_STAGGER * busy.min(MAX_STAGGER)).await;
            }
            // another worker may have taken it meanwhile: WouldBlock, wait for the next
            if let Ok(accepted) = pending.try_io(|l| l.get_ref().accept()) {
                let (socket, _) = accepted?;
                socket.set_nonblocking(true)?;
                return TcpStream::from_std(socket);
            }
        }
    }
}

/// Counts a connection while its task runs.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(count: &Arc<AtomicUsize>) -> Open {
        count.fetch_add(1, Ordering::Relaxed);
        Open(count.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Listen as `config.listen` says (the bound address goes to `ready`), then
/// serve until `stop` turns true.
pub async fn serve(
    engine: Arc<dyn Engine>,
    config: Config,
    ready: impl FnOnce(SocketAddr),
    mut stop: watch::Receiver<bool>,
) -> Result<(), WireError> {
    let tls = match &config.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let handlers = Arc::new(handlers(engine, &config)?);
    let thread_start = config.thread_start.clone();
    let named = match &config.listen {
        Listen::Address(address) => address.to_string(),
        Listen::Shared(_) => "the shared socket".to_owned(),
    };
    let listener = Listener::open(config.listen)
        .await
        .map_err(|e| WireError::new("08000", format!("cannot listen on {named}: {e}")))?;
    ready(
        listener
            .local_addr()
            .map_err(|e| WireError::internal(e.to_string()))?,
    );
    let open = Arc::new(AtomicUsize::new(0));
    let mut connections: Vec<std::thread::JoinHandle<()>> = Vec::new();
    loop {
        tokio::select! {
            accepted = listener.accept(&open) => {
                let Ok(socket) = accepted else { continue };
                connections.retain(|c| !c.is_finished());
                let connection = Connection {
                    handlers: handlers.clone(),
                    tls: tls.clone(),
                    counted: Open::new(&open),
                    stop: stop.clone(),
                    thread_start: thread_start.clone(),
                };
                if let Ok(thread) = connection.start(socket) {
                    connections.push(thread);
                }
            }
            _ = stop.changed() => {
                if *stop.borrow() {
                    break;
                }
            }
        }
    }
    // each connection ends at its next message (one running a statement, once it ends)
    let deadline = std::time::Instant::now() + STOP_WAIT;
    while connections.iter().any(|c| !c.is_finished()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// One accepted connection and what its thread needs.
struct Connection {
    handlers: Arc<Handlers>,
    tls: Option<TlsAcceptor>,
    counted: Open,
    stop: watch::Receiver<bool>,
    thread_start: Option<ThreadStart>,
}

impl Connection {
    /// Serve the connection on a thread of its own until it ends or the server stops.
    fn start(self, socket: TcpStream) -> io::Result<std::thread::JoinHandle<()>> {
        let socket = socket.into_std()?; // registered again with the thread's own runtime
        std::thread::Builder::new()
            .name("veil-conn".to_owned())
            .spawn(move || self.serve(socket))
    }

    fn serve(self, socket: std::net::TcpStream) {
        let Connection {
            handlers,
            tls,
            counted,
            mut stop,
            thread_start,
        } = self;
        let _counted = counted;
        // dropped last, after the runtime and the session it ends
        let _kept = thread_start.as_ref().map(|start| start());
        run_inline();
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            let Ok(socket) = TcpStream::from_std(socket) else {
                return;
            };
            tokio::select! {
                _ = process_socket(socket, tls, handlers) => {}
                _ = stopped(&mut stop) => {}
            }
        });
    }
}

/// Once the server is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}
