//! `ratelimit-server`: Envoy's rate-limit service on redis-ratelimit. This file reads the
//! flags and starts things; what they do lives in the modules (`docs/server.md` is the
//! guide).

mod config;
mod count;
mod flags;
mod grpc;
mod headers;
mod http;
mod json;
mod matcher;
mod metrics;
mod reload;
mod shutdown;

use std::future::IntoFuture;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use arc_swap::ArcSwap;
use clap::Parser;
use redis_ratelimit::Limiter;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tracing_subscriber::EnvFilter;

use crate::count::Service;
use crate::flags::{Flags, LogFormat};

// Each request allocates its messages, keys and futures: mimalloc's thread-local free
// lists cost less than glibc's malloc (a sixth of the CPU under load, by perf).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let flags = Flags::parse();
    log_to_stderr(flags.log_format);
    if flags.check_config {
        return match config::load(&flags.config) {
            Ok(loaded) => {
                print!("{}", loaded.summary());
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                eprintln!(
                    "{} error(s): the configuration does not load",
                    errors.0.len()
                );
                ExitCode::from(2)
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(run(flags))
}

async fn run(flags: Flags) -> ExitCode {
    let prometheus = match metrics::install() {
        Ok(handle) => handle,
        Err(e) => return fail(1, e),
    };
    let sources = match config::load::read_sources(&flags.config) {
        Ok(sources) => sources,
        Err(errors) => return fail(2, errors.to_string()),
    };
    let loaded = match config::load::build(&sources) {
        Ok(loaded) => loaded,
        Err(errors) => return fail(2, errors.to_string()),
    };
    let limiter = match limiter(&flags) {
        Ok(limiter) => limiter,
        Err(e) => return fail(2, e),
    };
    let service = Arc::new(Service {
        limiter,
        config: ArcSwap::from_pointee(loaded),
        // Once per process: the limiter's poller reads `{prefix}bans` for good.
        prefix: Box::leak(flags.prefix.clone().into_boxed_str()),
        fail_open: flags.fail_open,
        response_headers: flags.response_headers,
        metrics: metrics::ServiceMetrics::new(),
        draining: AtomicBool::new(false),
    });
    let (grpc_listener, http_listener) =
        match tokio::try_join!(TcpListener::bind(flags.grpc), TcpListener::bind(flags.http)) {
            Ok(listeners) => listeners,
            Err(e) => {
                return fail(
                    1,
                    format!("cannot listen on {} and {}: {e}", flags.grpc, flags.http),
                )
            }
        };
    let (grpc_addr, http_addr) = match (grpc_listener.local_addr(), http_listener.local_addr()) {
        (Ok(g), Ok(h)) => (g, h),
        (Err(e), _) | (_, Err(e)) => return fail(1, format!("cannot read the bound address: {e}")),
    };

    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<grpc::Grpc>>()
        .await;
    let grpc_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(grpc::server(service.clone()))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
                until_stopped(stopped.clone()),
            ),
    );
    let http_server = tokio::spawn(
        axum::serve(http_listener, http::router(service.clone(), prometheus))
            .with_graceful_shutdown(until_stopped(stopped.clone()))
            .into_future(),
    );
    let reloads = tokio::spawn(reload::watch(
        service.clone(),
        flags.config.clone(),
        sources,
        stopped.clone(),
    ));
    tracing::info!(grpc = %grpc_addr, http = %http_addr, "listening");

    if let Err(e) = shutdown::signalled().await {
        return fail(1, format!("cannot watch for signals: {e}"));
    }
    service
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    health
        .set_not_serving::<envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<grpc::Grpc>>()
        .await;
    let _ = stop.send(true);
    let drained = tokio::time::timeout(shutdown::DRAIN, async {
        tokio::join!(grpc_server, http_server, reloads)
    })
    .await;
    match drained {
        Ok((grpc_done, http_done, _)) => {
            if let Ok(Err(e)) = grpc_done {
                tracing::error!(error = %e, "the gRPC server failed");
            }
            if let Ok(Err(e)) = http_done {
                tracing::error!(error = %e, "the HTTP server failed");
            }
        }
        Err(_) => tracing::warn!(
            "connections still open {}s after the shutdown began: closing them",
            shutdown::DRAIN.as_secs()
        ),
    }
    match shutdown::finish(&service, flags.state_file.is_some()).await {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

/// The engine the flags describe.
fn limiter(flags: &Flags) -> Result<Limiter, String> {
    let limiter = match (&flags.redis, &flags.state_file) {
        (Some(_), Some(_)) => {
            return Err(
                "--state-file is for the embedded backend: with --redis the counts live in Redis"
                    .into(),
            )
        }
        (Some(url), None) => Limiter::redis(url)
            .map_err(|e| format!("--redis {url}: {e}"))?
            .timeout(flags.timeout),
        (None, state_file) => {
            tracing::warn!(
                "no --redis: the embedded backend counts, per process (run one instance, or give every instance the same Redis)"
            );
            let limiter = Limiter::memory();
            match state_file {
                Some(path) => limiter.state_file(path),
                None => limiter,
            }
        }
    };
    Ok(match flags.allowance {
        Some(allowance) => limiter.allowance(allowance),
        None => limiter,
    })
}

fn log_to_stderr(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env("RATELIMIT_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(false).init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn fail(status: u8, message: String) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(status)
}
