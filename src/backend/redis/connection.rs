//! Where a command goes: the one place the topologies (one server, the
//! master Sentinel names now, a cluster) are told apart. What each does
//! beyond this lives in its own file: `sentinel.rs`, `cluster.rs`, `tls.rs`.

#[cfg(feature = "redis-sentinel")]
use std::sync::Arc;

use ::redis::aio::ConnectionManager;
use ::redis::{ErrorKind, RedisError, Script, ServerErrorKind, Value};

use crate::backend::BackendError;

/// Makes a client for a URL (with the builder's TLS settings).
pub(super) type Open = Box<dyn Fn(&str) -> ::redis::RedisResult<::redis::Client> + Send + Sync>;

/// The connection of a backend, shared by its clones.
#[derive(Clone)]
pub(super) enum Connection {
    Standalone(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
    #[cfg(feature = "redis-sentinel")]
    Sentinel(Arc<super::sentinel::Sentinel>),
}

/// The connection one command takes.
enum Route {
    One(ConnectionManager),
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl Connection {
    /// One server's connection (standalone, or the master Sentinel names
    /// now), or the cluster's.
    fn route(&self) -> Result<Route, RedisError> {
        Ok(match self {
            Connection::Standalone(conn) => Route::One(conn.clone()),
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(conn) => Route::Cluster(conn.clone()),
            #[cfg(feature = "redis-sentinel")]
            Connection::Sentinel(sentinel) => Route::One(sentinel.current()?),
        })
    }

    /// The one server's connection (standalone, or the master Sentinel
    /// names now); `None` on a cluster, whose keys live on several nodes.
    pub(super) fn one_server(&self) -> Result<Option<ConnectionManager>, RedisError> {
        Ok(match self.route()? {
            Route::One(conn) => Some(conn),
            #[cfg(feature = "redis-cluster")]
            Route::Cluster(_) => None,
        })
    }

    /// Which topology, for `Debug`.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Connection::Standalone(_) => "standalone",
            #[cfg(feature = "redis-cluster")]
            Connection::Cluster(_) => "cluster",
            #[cfg(feature = "redis-sentinel")]
            Connection::Sentinel(_) => "sentinel",
        }
    }

    /// How a call ended, for a connection that follows a master.
    pub(super) fn followed<T>(&self, result: &Result<T, BackendError>) {
        #[cfg(feature = "redis-sentinel")]
        if let Connection::Sentinel(sentinel) = self {
            match result {
                Err(error) if !error.is_about_one_key() => sentinel.failed(),
                _ => sentinel.succeeded(),
            }
        }
        let _ = result;
    }

    pub(super) async fn query<T: ::redis::FromRedisValue>(
        &self,
        cmd: &::redis::Cmd,
    ) -> Result<T, RedisError> {
        match self.route()? {
            Route::One(mut conn) => cmd.query_async(&mut conn).await,
            #[cfg(feature = "redis-cluster")]
            Route::Cluster(mut conn) => cmd.query_async(&mut conn).await,
        }
    }

    pub(super) async fn query_pipeline(&self, pipe: &::redis::Pipeline) -> Result<(), RedisError> {
        match self.route()? {
            Route::One(mut conn) => pipe.query_async(&mut conn).await,
            #[cfg(feature = "redis-cluster")]
            Route::Cluster(mut conn) => pipe.query_async(&mut conn).await,
        }
    }

    /// `cmd`, an `EVALSHA` of `script`; a server that lost the script (a
    /// restart, a failover) gets it again, and the command once more.
    pub(super) async fn run(
        &self,
        script: &Script,
        cmd: &::redis::Cmd,
    ) -> Result<Value, RedisError> {
        match self.query::<Value>(cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(script).await?;
                self.query(cmd).await
            }
            reply => reply,
        }
    }

    pub(super) async fn load(&self, script: &Script) -> Result<String, RedisError> {
        match self.route()? {
            Route::One(mut conn) => script.load_async(&mut conn).await,
            #[cfg(feature = "redis-cluster")]
            Route::Cluster(mut conn) => script.load_async(&mut conn).await,
        }
    }
}

/// The TCP settings of every connection the builder opens: `TCP_NODELAY`.
/// With Nagle's algorithm (the socket's default) a request written while
/// an earlier one on the shared connection is unacknowledged waits for
/// that acknowledgement, which comes back with the earlier answer: under
/// concurrent decisions each took two round trips, so a Redis 25 ms away
/// timed out half the decisions of a 50 ms timeout
/// (`tests/it/store/faults.rs`).
pub(super) fn tcp_settings() -> ::redis::io::tcp::TcpSettings {
    ::redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// `url` as connection settings, with [`tcp_settings`].
pub(super) fn connection_info(url: &str) -> ::redis::RedisResult<::redis::ConnectionInfo> {
    use ::redis::IntoConnectionInfo;
    Ok(url.into_connection_info()?.set_tcp_settings(tcp_settings()))
}
