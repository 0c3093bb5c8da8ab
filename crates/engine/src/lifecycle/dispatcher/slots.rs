//! The worker pool's remote-call slots ([`CallSlots`]): a bound on the remote calls a process
//! makes at once and, when set, a bound on those of any one tenant, so one tenant's backlog
//! cannot take every slot while another tenant's command waits (issue 33, "a per-tenant cap on
//! commands in flight"; docs/operations.md, `knowledge_fs_max_concurrent_calls_per_tenant`).
//!
//! A call takes its tenant's permit first and then one of the process's, so a tenant at its cap
//! waits without holding a process slot that another tenant could use. Both semaphores are
//! first in, first out. A few of the process's slots may be reserved for the pool's prompt
//! lane ([`CallSlots::reserve_for_prompt_lane`]): a call made in that lane takes one of them
//! instead (after its tenant's permit, so the tenant bound holds in both lanes), never waiting
//! behind the calls of the backlog. Closing the slots (the pool's shutdown) fails every waiter
//! and every later request at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tenantry_kernel::TenantId;

#[cfg(test)]
use crate::swept::MIN_SWEEP_AT;
use crate::swept::SweptMap;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, SemaphorePermit, TryAcquireError};

/// The slots were closed (the pool shut down): the caller must not call the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotsClosed;

/// Remote-call slots of a process, optionally bounded per tenant.
#[derive(Debug)]
pub(crate) struct CallSlots {
    /// The slots of every call but the prompt lane's.
    all: Semaphore,
    /// The slots reserved for the prompt lane's calls (none unless reserved).
    prompt: Semaphore,
    per_tenant: Option<PerTenant>,
}

#[derive(Debug)]
struct PerTenant {
    /// Calls at once per tenant (at least 1).
    cap: usize,
    /// Each tenant's semaphore; an idle one (nobody holds or awaits a permit: an owned permit
    /// and a waiter each hold a reference) is swept when the map doubles.
    tenants: Mutex<SweptMap<TenantId, Semaphore>>,
    /// Requests waiting for their tenant's permit ([`CallSlots::waiting_for_tenant`]).
    waiting: AtomicUsize,
    /// Told whenever a request starts waiting for its tenant's permit
    /// ([`CallSlots::tenant_waiter_arrived`]).
    arrived: Notify,
}

/// One remote call's permits; dropping it frees them (the tenant's after the process's).
#[derive(Debug)]
pub(crate) struct CallPermit<'a> {
    _all: SemaphorePermit<'a>,
    _tenant: Option<OwnedSemaphorePermit>,
}

impl CallSlots {
    /// `slots` calls at once in all (at least 1), and at most `per_tenant` of them for one
    /// tenant when given (at least 1; a cap at or above `slots` bounds nothing and is dropped).
    pub(crate) fn new(slots: usize, per_tenant: Option<usize>) -> Self {
        let slots = slots.max(1);
        Self {
            all: Semaphore::new(slots),
            prompt: Semaphore::new(0),
            per_tenant: per_tenant
                .map(|cap| cap.max(1))
                .filter(|&cap| cap < slots)
                .map(|cap| PerTenant {
                    cap,
                    tenants: Mutex::new(SweptMap::default()),
                    waiting: AtomicUsize::new(0),
                    arrived: Notify::new(),
                }),
        }
    }

    /// Takes `reserved` of the slots out of the common ones for the calls of the pool's prompt
    /// lane (made inside [`Dispatcher::dispatch_prompt`](super::Dispatcher::dispatch_prompt)):
    /// the process still makes at most `slots` calls at once, `slots - reserved` of them
    /// outside the lane. At least one common slot always stays: `reserved` is capped at
    /// `slots - 1`.
    pub(crate) fn reserve_for_prompt_lane(self, reserved: usize) -> Self {
        let reserved = reserved.min(self.all.available_permits().saturating_sub(1));
        self.all.forget_permits(reserved);
        self.prompt.add_permits(reserved);
        self
    }

    /// Calls waiting for their tenant's previous call (their tenant at its bound).
    pub(crate) fn waiting_for_tenant(&self) -> usize {
        self.per_tenant
            .as_ref()
            .map_or(0, |p| p.waiting.load(Ordering::Acquire))
    }

    /// Completes when a request starts waiting for its tenant's permit (at once if one did
    /// since the last call); never without a tenant bound. The pool's claimer waits on it, so
    /// the places such waiters leave are claimed without waiting for a dispatch to end.
    pub(crate) async fn tenant_waiter_arrived(&self) {
        match &self.per_tenant {
            Some(per_tenant) => per_tenant.arrived.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Calls at once for one tenant, when bounded.
    pub(crate) fn per_tenant(&self) -> Option<usize> {
        self.per_tenant.as_ref().map(|p| p.cap)
    }

    /// Waits for a slot for a call on behalf of `tenant`: its tenant's permit first (when
    /// bounded), then one of the process's: a reserved one for a call of the prompt lane,
    /// else a common one.
    ///
    /// # Errors
    /// [`SlotsClosed`] when the slots are closed, before or while waiting.
    pub(crate) async fn acquire(&self, tenant: &TenantId) -> Result<CallPermit<'_>, SlotsClosed> {
        let tenant_permit = match &self.per_tenant {
            Some(per_tenant) => {
                let semaphore = {
                    let mut tenants = per_tenant.lock();
                    // Checked under the lock `close` takes: a semaphore made after the close
                    // would never be closed.
                    if self.all.is_closed() {
                        return Err(SlotsClosed);
                    }
                    tenants.get_or_insert_with(tenant, || Semaphore::new(per_tenant.cap))
                };
                let permit = match semaphore.clone().try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(TryAcquireError::Closed) => return Err(SlotsClosed),
                    Err(TryAcquireError::NoPermits) => {
                        let _counted = Waiting::enter(per_tenant);
                        semaphore.acquire_owned().await.map_err(|_| SlotsClosed)?
                    }
                };
                Some(permit)
            }
            None => None,
        };
        let lane = if super::in_prompt_lane() {
            &self.prompt
        } else {
            &self.all
        };
        let all = lane.acquire().await.map_err(|_| SlotsClosed)?;
        Ok(CallPermit {
            _all: all,
            _tenant: tenant_permit,
        })
    }

    /// Closes the slots: every waiter and every later [`acquire`](Self::acquire) fails with
    /// [`SlotsClosed`]; permits already held stay valid until dropped.
    pub(crate) fn close(&self) {
        match &self.per_tenant {
            Some(per_tenant) => {
                let tenants = per_tenant.lock();
                self.all.close();
                self.prompt.close();
                for semaphore in tenants.values() {
                    semaphore.close();
                }
            }
            None => {
                self.all.close();
                self.prompt.close();
            }
        }
    }

    /// Tenants with a semaphore kept (held, awaited or idle and not yet swept).
    #[cfg(test)]
    fn tenants_kept(&self) -> usize {
        self.per_tenant.as_ref().map_or(0, |p| p.lock().len())
    }
}

/// One request counted as waiting for its tenant's permit while it lives (also when the wait
/// is cancelled).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(per_tenant: &'a PerTenant) -> Self {
        per_tenant.waiting.fetch_add(1, Ordering::AcqRel);
        per_tenant.arrived.notify_one();
        Self(&per_tenant.waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PerTenant {
    fn lock(&self) -> MutexGuard<'_, SweptMap<TenantId, Semaphore>> {
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether `future` completes within a few scheduler turns.
    async fn ready<T>(future: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(20), future)
            .await
            .ok()
    }

    /// [`ready`] for a request made in the prompt lane.
    async fn in_lane<T>(future: impl Future<Output = T>) -> Option<T> {
        ready(super::super::PROMPT_LANE.scope((), future)).await
    }

    #[tokio::test]
    async fn a_tenant_at_its_cap_waits_without_taking_a_slot_from_another_tenant() {
        let slots = CallSlots::new(3, Some(2));
        let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
        let a1 = slots.acquire(&a).await.unwrap();
        let _a2 = slots.acquire(&a).await.unwrap();
        assert!(
            ready(slots.acquire(&a)).await.is_none(),
            "a third call of A waits"
        );
        // The process has one slot left: B gets it at once although A is waiting.
        let b1 = ready(slots.acquire(&b))
            .await
            .expect("B is not behind A's waiter");
        assert!(
            ready(slots.acquire(&b)).await.is_none(),
            "all 3 slots are out"
        );
        drop(b1);
        drop(a1);
        assert!(
            ready(slots.acquire(&a)).await.is_some(),
            "A's permit came back"
        );
    }

    #[tokio::test]
    async fn without_a_cap_or_with_one_at_the_slots_a_tenant_may_take_them_all() {
        for per_tenant in [None, Some(3), Some(10)] {
            let slots = CallSlots::new(3, per_tenant);
            assert_eq!(slots.per_tenant(), None, "{per_tenant:?}");
            let a = tenant("tenant-a");
            let held = [
                slots.acquire(&a).await.unwrap(),
                slots.acquire(&a).await.unwrap(),
                slots.acquire(&a).await.unwrap(),
            ];
            assert!(ready(slots.acquire(&a)).await.is_none());
            drop(held);
        }
        assert_eq!(
            CallSlots::new(3, Some(0)).per_tenant(),
            Some(1),
            "a cap is at least 1"
        );
    }

    #[tokio::test]
    async fn closing_fails_the_waiters_of_a_tenant_and_every_later_call() {
        let slots = Arc::new(CallSlots::new(4, Some(1)));
        let a = tenant("tenant-a");
        let held = slots.acquire(&a).await.unwrap();
        let waiter = tokio::spawn({
            let slots = slots.clone();
            let a = a.clone();
            async move { slots.acquire(&a).await.map(drop) }
        });
        tokio::task::yield_now().await;
        slots.close();
        assert_eq!(waiter.await.unwrap(), Err(SlotsClosed));
        assert_eq!(
            slots.acquire(&tenant("tenant-b")).await.err(),
            Some(SlotsClosed)
        );
        drop(held);
        assert_eq!(slots.acquire(&a).await.err(), Some(SlotsClosed));
    }

    /// The prompt lane's calls take the slots reserved for them and never wait behind the
    /// common ones; the common calls cannot take the reserved slots; the process's bound
    /// (common + reserved) holds; the tenant bound holds in the lane too; at least one common
    /// slot stays.
    #[tokio::test]
    async fn reserved_slots_serve_the_prompt_lane_alone() {
        let slots = Arc::new(CallSlots::new(5, Some(3)).reserve_for_prompt_lane(2));
        let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
        let common = [
            slots.acquire(&a).await.unwrap(),
            slots.acquire(&a).await.unwrap(),
            slots.acquire(&b).await.unwrap(),
        ];
        assert!(
            ready(slots.acquire(&b)).await.is_none(),
            "3 common slots, the other 2 are reserved"
        );
        let prompt = in_lane(slots.acquire(&b))
            .await
            .expect("the lane's call takes a reserved slot")
            .unwrap();
        drop(prompt);
        // Tenant A holds 2 of its 3: its third call may take a reserved slot; a fourth waits
        // for its tenant even in the lane, with a reserved slot still free.
        let third = in_lane(slots.acquire(&a))
            .await
            .expect("a reserved slot")
            .unwrap();
        assert!(
            in_lane(slots.acquire(&a)).await.is_none(),
            "the tenant bound holds in the lane"
        );
        let other = in_lane(slots.acquire(&b))
            .await
            .expect("the second reserved slot was free")
            .unwrap();
        assert!(
            in_lane(slots.acquire(&b)).await.is_none(),
            "two reserved slots"
        );
        drop((common, third, other));

        let all_reserved = CallSlots::new(2, None).reserve_for_prompt_lane(5);
        let _one = ready(all_reserved.acquire(&a))
            .await
            .expect("one common slot stays")
            .unwrap();
        let _two = in_lane(all_reserved.acquire(&a))
            .await
            .expect("one slot reserved of 2")
            .unwrap();
        assert!(ready(all_reserved.acquire(&a)).await.is_none());
    }

    #[tokio::test]
    async fn idle_tenants_are_swept_so_the_map_stays_bounded() {
        let slots = CallSlots::new(8, Some(2));
        let busy = tenant("tenant-busy");
        let _held = slots.acquire(&busy).await.unwrap();
        for i in 0..1_000 {
            drop(
                slots
                    .acquire(&tenant(&format!("tenant-{i}")))
                    .await
                    .unwrap(),
            );
            assert!(
                slots.tenants_kept() <= MIN_SWEEP_AT,
                "{}",
                slots.tenants_kept()
            );
        }
        // The held tenant's semaphore survived every sweep: its cap still holds.
        let _second = slots.acquire(&busy).await.unwrap();
        assert!(ready(slots.acquire(&busy)).await.is_none());
    }
}
