//! Group commit: a [`LifecycleStore`] decorator that lets the concurrent saga steps of one
//! process share transactions and statements.
//!
//! [`GroupCommitStore`] wraps a store and is itself a store, so the [`Dispatcher`] and the
//! workers use it unchanged (`Dispatcher::new(GroupCommitStore::start(store, config), ..)`):
//! - **settles** go into a queue. A free flusher task takes the oldest request plus every
//!   request queued behind it (up to [`GroupCommitConfig::max_batch`]), optionally waits
//!   [`GroupCommitConfig::max_wait`] for more, and hands the batch to
//!   [`CommandQueue::settle_many`], which settles it in one transaction. Each caller gets its
//!   own item's result: a lost lease, a failed compare-and-set or a refused supersede is
//!   reported to that caller only and writes nothing for it, and the rest of the batch still
//!   settles. A failure of the whole batch reaches every caller of the batch as
//!   [`SettleError::Store`], as a failed single settle would.
//! - **control-space reads** (when [`GroupCommitConfig::coalesce_reads`]) are queued the same
//!   way and answered by one [`ControlSpaceReader::control_spaces`] statement per batch. A read
//!   is always executed after it was requested, so it is never staler than a direct read.
//! - everything else (claim, intake, listings) goes straight to the wrapped store, and so does
//!   a batch handed to [`CommandQueue::settle_many`] directly: it is executed at once, not
//!   queued (the worker pool's prompt lane settles a command so, as a batch of one; the order
//!   of queued items below does not cover it, and its compare-and-set decides against a
//!   queued one as between any two settles).
//!
//! Batching is natural: under low load a request finds an idle flusher and is executed at once
//! (a batch of one; with `max_wait` zero no latency is added); under load, requests queue while
//! the flushers are busy and the next batch takes them all. [`GroupCommitConfig::max_in_flight`]
//! flushers of each kind run batches concurrently, each on its own pooled connection.
//!
//! Guarantees are those of `settle_many`: all or nothing per command, the lease epoch checked
//! for every command, the control-space compare-and-set for every command that has one, items
//! on the same command or control space applied in the order they were queued. A caller that
//! stops waiting (its future dropped) does not withdraw its settle: it is applied or refused
//! as if the caller had waited, like a single settle whose answer was lost; the lease epoch
//! keeps that safe. No transaction is held while a flusher waits for requests.
//!
//! When the last clone of the store is dropped the queues close; the flushers finish what is
//! queued and stop.
//!
//! [`Dispatcher`]: super::Dispatcher

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tenantry_kernel::{ControlSpaceId, TenantId};
use tenantry_lifecycle::{ControlSpace, LeaseToken, Settlement};
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_ports::forward;
use tenantry_ports::lifecycle::{
    CommandQueue, ControlSpaceReader, LifecycleStore, SettleError, StoreError,
};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::warn;

/// Settings of a [`GroupCommitStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitConfig {
    /// Most requests per batch (at least 1). Default 128.
    pub max_batch: usize,
    /// How long a flusher that took a request waits for more before executing, when fewer
    /// than `max_batch` are queued (see [`wait_only_when_busy`](Self::wait_only_when_busy)).
    /// Zero executes what is queued at once: batches then form only from requests that
    /// arrived while the flushers were busy. Default 0.
    pub max_wait: Duration,
    /// Batches of each kind executed concurrently (flusher tasks; at least 1). Default 2.
    pub max_in_flight: usize,
    /// Whether control-space reads are coalesced too. Default true.
    pub coalesce_reads: bool,
    /// Adaptive wait (default true): a flusher waits [`max_wait`](Self::max_wait) only while
    /// another batch of its kind is being executed. Under load the requests that arrive
    /// during that wait would have queued behind the executing batch anyway, so fewer,
    /// larger transactions form; an idle store executes a lone request at once, adding no
    /// latency. False: always wait `max_wait`.
    pub wait_only_when_busy: bool,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        Self {
            max_batch: 128,
            max_wait: Duration::ZERO,
            max_in_flight: 2,
            coalesce_reads: true,
            wait_only_when_busy: true,
        }
    }
}

/// Builder-style setters over [`GroupCommitConfig::default`].
impl GroupCommitConfig {
    /// Sets [`max_batch`](Self::max_batch) (at least 1).
    #[must_use]
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// Sets [`max_wait`](Self::max_wait).
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Sets [`max_in_flight`](Self::max_in_flight) (at least 1).
    #[must_use]
    pub fn with_max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    /// Sets [`coalesce_reads`](Self::coalesce_reads).
    #[must_use]
    pub fn with_coalesce_reads(mut self, coalesce_reads: bool) -> Self {
        self.coalesce_reads = coalesce_reads;
        self
    }

    /// Sets [`wait_only_when_busy`](Self::wait_only_when_busy).
    #[must_use]
    pub fn with_wait_only_when_busy(mut self, wait_only_when_busy: bool) -> Self {
        self.wait_only_when_busy = wait_only_when_busy;
        self
    }
}

/// One queued settle.
struct SettleRequest {
    lease: LeaseToken,
    settlement: Settlement,
    reply: oneshot::Sender<Result<(), SettleError>>,
}

/// One queued control-space read.
struct ReadRequest {
    key: (TenantId, ControlSpaceId),
    reply: oneshot::Sender<Result<Option<ControlSpace>, StoreError>>,
}

/// The decorator; see the module documentation. Cheap to clone (clones share the queues).
pub struct GroupCommitStore<S> {
    inner: Arc<S>,
    settles: mpsc::UnboundedSender<SettleRequest>,
    reads: Option<mpsc::UnboundedSender<ReadRequest>>,
}

impl<S> Clone for GroupCommitStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            settles: self.settles.clone(),
            reads: self.reads.clone(),
        }
    }
}

impl<S> std::fmt::Debug for GroupCommitStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommitStore")
            .field("coalesce_reads", &self.reads.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: LifecycleStore + 'static> GroupCommitStore<S> {
    /// Wraps `inner` and starts the flusher tasks on the current tokio runtime; they time
    /// [`GroupCommitConfig::max_wait`] on the system clock.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start(inner: S, config: GroupCommitConfig) -> Self {
        Self::start_with_clock(inner, config, Arc::new(SystemClock))
    }

    /// [`GroupCommitStore::start`] with the flushers timing
    /// [`GroupCommitConfig::max_wait`] on `clock` (a test's or the simulation's clock).
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start_with_clock(inner: S, config: GroupCommitConfig, clock: Arc<dyn Clock>) -> Self {
        let inner = Arc::new(inner);
        let max_batch = config.max_batch.max(1);
        let (settles, settle_queue) = mpsc::unbounded_channel::<SettleRequest>();
        let settle_queue = Arc::new(Mutex::new(settle_queue));
        let settle_wait = Wait::new(&config);
        for _ in 0..config.max_in_flight.max(1) {
            let store = inner.clone();
            tokio::spawn(flusher(
                settle_queue.clone(),
                max_batch,
                settle_wait.clone(),
                clock.clone(),
                move |batch| {
                    let store = store.clone();
                    async move { settle_batch(store.as_ref(), batch).await }
                },
            ));
        }
        let reads = config.coalesce_reads.then(|| {
            let (reads, read_queue) = mpsc::unbounded_channel::<ReadRequest>();
            let read_queue = Arc::new(Mutex::new(read_queue));
            let read_wait = Wait::new(&config);
            for _ in 0..config.max_in_flight.max(1) {
                let store = inner.clone();
                tokio::spawn(flusher(
                    read_queue.clone(),
                    max_batch,
                    read_wait.clone(),
                    clock.clone(),
                    move |batch| {
                        let store = store.clone();
                        async move { read_batch(store.as_ref(), batch).await }
                    },
                ));
            }
            reads
        });
        Self {
            inner,
            settles,
            reads,
        }
    }
}

impl<S> GroupCommitStore<S> {
    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// The answer when no flusher is left (the runtime is shutting down): nothing was done.
fn stopped() -> StoreError {
    StoreError::unavailable("the group-commit flushers have stopped; nothing was written")
}

/// When the flushers of one kind wait for more requests: the configured wait, and the count
/// of batches of that kind being executed (shared by its flushers).
#[derive(Clone)]
struct Wait {
    max_wait: Duration,
    only_when_busy: bool,
    executing: Arc<AtomicUsize>,
}

impl Wait {
    fn new(config: &GroupCommitConfig) -> Self {
        Self {
            max_wait: config.max_wait,
            only_when_busy: config.wait_only_when_busy,
            executing: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Whether a flusher holding a partial batch waits for more now.
    fn waits(&self) -> bool {
        !self.max_wait.is_zero()
            && (!self.only_when_busy || self.executing.load(Ordering::Acquire) > 0)
    }
}

/// Takes batches off the shared queue and runs `execute` on each until the queue closes.
async fn flusher<R, F, Fut>(
    queue: Arc<Mutex<mpsc::UnboundedReceiver<R>>>,
    max_batch: usize,
    wait: Wait,
    clock: Arc<dyn Clock>,
    mut execute: F,
) where
    F: FnMut(Vec<R>) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        let mut batch = Vec::with_capacity(max_batch);
        {
            // One flusher gathers at a time; the others wait here or execute their batch.
            let mut receiver = queue.lock().await;
            if receiver.recv_many(&mut batch, max_batch).await == 0 {
                return;
            }
            if batch.len() < max_batch && wait.waits() {
                let mut waited = clock.sleep(wait.max_wait);
                while batch.len() < max_batch {
                    let room = max_batch - batch.len();
                    let received = tokio::select! {
                        biased;
                        received = receiver.recv_many(&mut batch, room) => received,
                        () = &mut waited => 0,
                    };
                    if received == 0 {
                        break;
                    }
                }
            }
        }
        wait.executing.fetch_add(1, Ordering::AcqRel);
        execute(batch).await;
        wait.executing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Settles `batch` with one `settle_many` call and answers every request.
async fn settle_batch<S: CommandQueue + ?Sized>(store: &S, batch: Vec<SettleRequest>) {
    let items: Vec<(LeaseToken, Settlement)> = batch
        .iter()
        .map(|r| (r.lease.clone(), r.settlement.clone()))
        .collect();
    match store.settle_many(&items).await {
        Ok(results) if results.len() == batch.len() => {
            for (request, result) in batch.into_iter().zip(results) {
                // A caller that stopped waiting does not need its answer.
                let _ = request.reply.send(result);
            }
        }
        Ok(results) => {
            warn!(
                expected = batch.len(),
                answered = results.len(),
                "settle_many answered the wrong number of results; reporting the batch as failed"
            );
            let error =
                StoreError::unavailable("settlement batch answered the wrong number of results");
            for request in batch {
                let _ = request.reply.send(Err(SettleError::Store(error.clone())));
            }
        }
        Err(error) => {
            warn!(%error, size = batch.len(), "settlement batch failed");
            for request in batch {
                let _ = request.reply.send(Err(SettleError::Store(error.clone())));
            }
        }
    }
}

/// Reads the control spaces of `batch` with one `control_spaces` call and answers each.
async fn read_batch<S: ControlSpaceReader + ?Sized>(store: &S, batch: Vec<ReadRequest>) {
    let keys: Vec<(TenantId, ControlSpaceId)> = batch.iter().map(|r| r.key.clone()).collect();
    match store.control_spaces(&keys).await {
        Ok(spaces) if spaces.len() == batch.len() => {
            for (request, space) in batch.into_iter().zip(spaces) {
                let _ = request.reply.send(Ok(space));
            }
        }
        Ok(_) => {
            let error =
                StoreError::unavailable("control-space read answered the wrong number of rows");
            for request in batch {
                let _ = request.reply.send(Err(error.clone()));
            }
        }
        Err(error) => {
            for request in batch {
                let _ = request.reply.send(Err(error.clone()));
            }
        }
    }
}

/// The decorator's inner value for the forwarded calls: everything but `settle` and
/// `control_space` reaches the wrapped store unchanged.
impl<S> forward::Decorator for GroupCommitStore<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: LifecycleStore + 'static> forward::CommandQueue for GroupCommitStore<S> {
    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        let (reply, answer) = oneshot::channel();
        let request = SettleRequest {
            lease: lease.clone(),
            settlement: settlement.clone(),
            reply,
        };
        if self.settles.send(request).is_err() {
            return Err(SettleError::Store(stopped()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(SettleError::Store(stopped())))
    }
}

#[async_trait]
impl<S: LifecycleStore + 'static> forward::ControlSpaceReader for GroupCommitStore<S> {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        let Some(reads) = &self.reads else {
            return self
                .inner()
                .control_space(tenant_id, control_space_id)
                .await;
        };
        let (reply, answer) = oneshot::channel();
        let request = ReadRequest {
            key: (tenant_id.clone(), control_space_id.clone()),
            reply,
        };
        if reads.send(request).is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

impl<S: LifecycleStore + 'static> forward::IntakeStore for GroupCommitStore<S> {}

#[cfg(test)]
mod tests;
