//! What a fleet ([`config::Fleet`](crate::config::Fleet)) asks of Redis
//! beside decisions, on every topology: a command on the server that holds
//! a key (keyless ones too: `ROLE`, `WAIT`) and where to subscribe to the
//! fleet's channel. (A shared capacity's calls are `script/capacity.rs`.)
//!
//! The channel is Redis's classic pub/sub: on a cluster a `PUBLISH` on any
//! node reaches the subscribers of every node, so a server subscribes to
//! whichever node answers; behind Sentinel it subscribes to the master the
//! sentinels name now, and again when they name another.

#[cfg(feature = "config")]
use ::redis::{Client, Cmd, FromRedisValue, RedisError};

#[cfg(feature = "config")]
use super::RedisBackend;
#[cfg(feature = "config")]
use crate::backend::BackendError;

/// Where a backend's servers can be subscribed to.
#[cfg(feature = "config")]
#[derive(Clone)]
pub(super) enum Listen {
    /// One server, or any node of a cluster, in this order.
    Servers(std::sync::Arc<[(String, Client)]>),
    /// The master the sentinels name now.
    #[cfg(feature = "redis-sentinel")]
    Master,
    /// A connection the user built: nothing to subscribe with.
    Nowhere,
}

#[cfg(feature = "config")]
impl RedisBackend {
    /// `cmd` on the server that holds `key` (on a cluster, the primary of
    /// its slot; elsewhere the one server), reported to a connection that
    /// follows a master.
    pub(crate) async fn command_for<T: FromRedisValue>(
        &self,
        key: &str,
        cmd: &Cmd,
    ) -> Result<T, RedisError> {
        let answer = self.on_holder_of(key, cmd).await;
        let followed = answer
            .as_ref()
            .map(|_| ())
            .map_err(|e| BackendError::from(e.clone()));
        self.link.conn.followed(&followed);
        Ok(::redis::from_redis_value(answer?)?)
    }

    async fn on_holder_of(&self, key: &str, cmd: &Cmd) -> Result<::redis::Value, RedisError> {
        #[cfg(feature = "redis-cluster")]
        if let super::connection::Connection::Cluster(conn) = &self.link.conn {
            use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
            let slot = super::script::slot::slot(key.as_bytes());
            let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
            return conn
                .clone()
                .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                .await;
        }
        let _ = key;
        self.link.conn.query(cmd).await
    }

    /// The servers to subscribe to now, each with a name that tells them
    /// apart, in the order to try them: none when the backend was built on
    /// a connection of the user's.
    pub(crate) fn subscribable(&self) -> Vec<(String, Client)> {
        match &self.listen {
            Listen::Servers(servers) => servers.to_vec(),
            #[cfg(feature = "redis-sentinel")]
            Listen::Master => match &self.link.conn {
                super::connection::Connection::Sentinel(sentinel) => {
                    sentinel.master_client().into_iter().collect()
                }
                _ => Vec::new(),
            },
            Listen::Nowhere => Vec::new(),
        }
    }

    /// Which topology: `standalone`, `cluster` or `sentinel`.
    pub(crate) fn topology(&self) -> &'static str {
        self.link.conn.kind()
    }
}
