//! Wake-ups across processes on PostgreSQL: every command intake sends `NOTIFY` on
//! [`WAKE_CHANNEL`] in its own transaction, and each process holds one listener connection
//! ([`WakeListener`]) that turns the notifications into
//! [`Wakeups::wake`](tenantry_ports::wake::Wakeups::wake) for its idle workers.
//!
//! The listener is health-checked. A connection closed by the server (`pg_terminate_backend`,
//! a restart) is seen at once (end of stream); one that stops answering is seen by the
//! heartbeat: when no notification arrived for [`ListenerConfig::heartbeat`], a `SELECT 1` on
//! the listener connection must answer within [`ListenerConfig::answer_timeout`]. Either way
//! the connection is dropped, a new one opened (a dedicated pool of one connection,
//! `application_name = tenantry-wake-listener`), `LISTEN` issued again, and the workers are
//! woken once (a catch-up claim: notifications sent while the listener was away are lost).
//! Reconnections are counted ([`WakeListener::reconnections`], metric
//! `tenantry_wake_listener_reconnections_total`; gauge `tenantry_wake_listener_connected`).
//! With the defaults a dead or silent connection is replaced within a second.
//!
//! SQLite has no notifications: there the workers of one process are woken by its intake
//! (the engine's `CommandIntake::with_wakeups`) and other processes' commands are found by the
//! idle poll.

#[cfg(feature = "postgres")]
pub use listener::{ListenerConfig, ListenerState, WakeListener};

/// The notification channel of new commands (`LISTEN tenantry_lifecycle_wake`).
pub const WAKE_CHANNEL: &str = "tenantry_lifecycle_wake";

/// The statement an intake runs after inserting a command (PostgreSQL only). Identical
/// notifications of one transaction are delivered once, at commit; none on rollback.
pub(crate) const NOTIFY_SQL: &str = "SELECT pg_notify('tenantry_lifecycle_wake', '')";

#[cfg(feature = "postgres")]
mod listener {
    use std::time::Duration;

    use sea_orm::sqlx::Executor;
    use sea_orm::sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
    use tenantry_ports::wake::Wakeups;
    use tokio::sync::watch;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    use super::WAKE_CHANNEL;
    use crate::connect::{Backend, Database};

    /// The `application_name` of listener connections (find them in `pg_stat_activity`).
    const APPLICATION_NAME: &str = "tenantry-wake-listener";

    /// Timing of the listener's health check and reconnection.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ListenerConfig {
        /// Quiet time after which the connection is asked to answer (default 250 ms).
        pub heartbeat: Duration,
        /// How long the heartbeat `SELECT 1`, the connect and the `LISTEN` may take before the
        /// connection counts as dead (default 500 ms).
        pub answer_timeout: Duration,
        /// Pause between failed connection attempts (default 200 ms); the first attempt after
        /// a loss is immediate.
        pub retry_pause: Duration,
    }

    impl Default for ListenerConfig {
        fn default() -> Self {
            Self {
                heartbeat: Duration::from_millis(250),
                answer_timeout: Duration::from_millis(500),
                retry_pause: Duration::from_millis(200),
            }
        }
    }

    /// What the listener is doing, published on every change ([`WakeListener::state`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct ListenerState {
        /// Whether `LISTEN` is in effect on a live connection.
        pub listening: bool,
        /// Connections re-established after the first one (each also woke the workers).
        pub reconnections: u64,
        /// Notifications received.
        pub notifications: u64,
    }

    /// One process's listener connection (see the [module docs](super)). Stops when
    /// [`stop`](Self::stop)ped or dropped.
    #[derive(Debug)]
    pub struct WakeListener {
        state: watch::Receiver<ListenerState>,
        stop: watch::Sender<bool>,
        task: Option<JoinHandle<()>>,
    }

    impl WakeListener {
        /// Starts listening on `db` (connecting in the background; until then, and whenever
        /// the connection is down, workers rely on their idle poll) and wakes `wakeups` on
        /// every notification and after every reconnection. `None` on SQLite, which has no
        /// notifications.
        pub fn spawn(db: &Database, wakeups: Wakeups, config: ListenerConfig) -> Option<Self> {
            if db.backend != Backend::Postgres {
                return None;
            }
            let pool = db.conn.get_postgres_connection_pool().clone();
            let (state_tx, state) = watch::channel(ListenerState::default());
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(run(pool, wakeups, config, state_tx, stopped));
            Some(Self {
                state,
                stop,
                task: Some(task),
            })
        }

        /// The current state.
        pub fn state(&self) -> ListenerState {
            *self.state.borrow()
        }

        /// A receiver of every state change (tests wait on it).
        pub fn watch(&self) -> watch::Receiver<ListenerState> {
            self.state.clone()
        }

        /// Connections re-established since the start.
        pub fn reconnections(&self) -> u64 {
            self.state.borrow().reconnections
        }

        /// Stops listening and closes the connection.
        pub async fn stop(mut self) {
            let _ = self.stop.send(true);
            if let Some(task) = self.task.take() {
                let _ = task.await;
            }
        }
    }

    impl Drop for WakeListener {
        fn drop(&mut self) {
            let _ = self.stop.send(true);
        }
    }

    /// Why one connection's service ended.
    enum Ended {
        Stopped,
        Lost(String),
    }

    async fn run(
        pool: PgPool,
        wakeups: Wakeups,
        config: ListenerConfig,
        state: watch::Sender<ListenerState>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut connected_before = false;
        loop {
            if *stopped.borrow() {
                return;
            }
            // Read at every (re)connection: after a failover the pool of a multi-host URL
            // points at the new primary (`crate::pg_hosts`), and the listener follows it.
            let options = pool
                .connect_options()
                .as_ref()
                .clone()
                .application_name(APPLICATION_NAME);
            let attempt = tokio::time::timeout(config.answer_timeout, async {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .min_connections(0)
                    .test_before_acquire(false)
                    .acquire_timeout(config.answer_timeout)
                    .connect_with(options.clone())
                    .await?;
                let mut listener = PgListener::connect_with(&pool).await?;
                listener.eager_reconnect(false);
                listener.listen(WAKE_CHANNEL).await?;
                Ok::<_, sea_orm::sqlx::Error>((pool, listener))
            })
            .await;
            let (own_pool, mut listener) = match attempt {
                Ok(Ok(connected)) => connected,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "wake listener cannot connect; workers rely on their idle poll");
                    if pause(&mut stopped, config.retry_pause).await {
                        return;
                    }
                    continue;
                }
                Err(_) => {
                    tracing::warn!(
                        "wake listener connect timed out; workers rely on their idle poll"
                    );
                    if pause(&mut stopped, config.retry_pause).await {
                        return;
                    }
                    continue;
                }
            };
            // Exported at 0 from the first connection on, so a rate or an alert has a series.
            metrics::counter!("tenantry_wake_listener_reconnections_total")
                .increment(u64::from(connected_before));
            if connected_before {
                state.send_modify(|s| s.reconnections += 1);
                tracing::info!("wake listener reconnected; LISTEN issued again");
            }
            connected_before = true;
            // Catch-up: whatever was committed while nobody listened is claimed now.
            wakeups.wake();
            metrics::gauge!("tenantry_wake_listener_connected").set(1.0);
            state.send_modify(|s| s.listening = true);
            let ended = serve(&mut listener, &wakeups, config, &state, &mut stopped).await;
            state.send_modify(|s| s.listening = false);
            metrics::gauge!("tenantry_wake_listener_connected").set(0.0);
            drop(listener);
            // Closing waits for the connection to be returned and shut; never block on it.
            tokio::spawn(async move { own_pool.close().await });
            match ended {
                Ended::Stopped => return,
                Ended::Lost(reason) => {
                    tracing::warn!(%reason, "wake listener connection lost; reconnecting");
                }
            }
        }
    }

    /// Receives notifications until the connection fails its health check or the listener
    /// is stopped.
    async fn serve(
        listener: &mut PgListener,
        wakeups: &Wakeups,
        config: ListenerConfig,
        state: &watch::Sender<ListenerState>,
        stopped: &mut watch::Receiver<bool>,
    ) -> Ended {
        let mut ping_at = Instant::now() + config.heartbeat;
        loop {
            tokio::select! {
                _ = stopped.changed() => return Ended::Stopped,
                // Cancel safe (sqlx reads whole messages from its buffer), so the heartbeat
                // may interrupt it.
                received = listener.try_recv() => match received {
                    Ok(Some(_)) => {
                        state.send_modify(|s| s.notifications += 1);
                        wakeups.wake();
                        ping_at = Instant::now() + config.heartbeat;
                    }
                    Ok(None) => return Ended::Lost("the server closed the connection".into()),
                    Err(error) => return Ended::Lost(error.to_string()),
                },
                () = tokio::time::sleep_until(ping_at) => {
                    match tokio::time::timeout(config.answer_timeout, listener.execute("SELECT 1")).await {
                        Ok(Ok(_)) => ping_at = Instant::now() + config.heartbeat,
                        Ok(Err(error)) => return Ended::Lost(error.to_string()),
                        Err(_) => {
                            return Ended::Lost(format!(
                                "no answer to the heartbeat within {:?}",
                                config.answer_timeout
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Waits `pause` unless stopped first; true when stopped.
    async fn pause(stopped: &mut watch::Receiver<bool>, pause: Duration) -> bool {
        tokio::select! {
            _ = stopped.changed() => true,
            () = tokio::time::sleep(pause) => *stopped.borrow(),
        }
    }
}
