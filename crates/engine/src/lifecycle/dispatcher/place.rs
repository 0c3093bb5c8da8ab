//! A dispatch's place among the worker pool's counted dispatches, given back when its settle
//! begins (issue 33; docs/protocol.md, "A settling dispatch holds no claim place").
//!
//! The pool bounds the dispatches that have not finished their remote calls (issue 29: a
//! replica never holds more than it can start within one call time). A dispatch that has sent
//! its settle (a settlement with an outcome: ack, retry, fail or moot, that supersedes no other
//! command) makes no further remote call, so it no longer counts there: the pool can claim
//! into its place while the settle waits for its group commit. It still counts among the
//! commands the pool holds (`WorkerPool::max_held_settling` of them) until its task ends. A
//! settlement that supersedes keeps the place: a deletion whose supersede is refused goes on
//! to the remote.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

tokio::task_local! {
    /// Set around a dispatch of the worker pool's claimer ([`SettlingPlaces::scope`]).
    static PLACE: Place;
}

/// The pool's count of dispatches that have given their place back and not yet ended, and
/// the signal the claimer waits on for places to free.
#[derive(Debug, Default)]
pub(crate) struct SettlingPlaces {
    settling: AtomicUsize,
    freed: Notify,
}

impl SettlingPlaces {
    /// Dispatches that have begun their settle and not yet ended.
    pub(crate) fn settling(&self) -> usize {
        self.settling.load(Ordering::Acquire)
    }

    /// Resolves once a dispatch has given its place back since the last call (one stored
    /// signal, as [`Notify::notify_one`]).
    pub(crate) async fn freed(&self) {
        self.freed.notified().await;
    }

    /// Runs `dispatch` holding a place of `places`: its first settle with an outcome (and no
    /// supersede) gives the place back ([`give_back`]), and the count of settling dispatches
    /// drops again when the dispatch ends (completes, fails or is dropped).
    pub(crate) fn scope<F: Future>(
        places: Arc<Self>,
        dispatch: F,
    ) -> impl Future<Output = F::Output> {
        PLACE.scope(
            Place {
                places,
                given_back: AtomicBool::new(false),
            },
            dispatch,
        )
    }
}

/// One dispatch's place ([`SettlingPlaces::scope`]).
struct Place {
    places: Arc<SettlingPlaces>,
    given_back: AtomicBool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.given_back.load(Ordering::Acquire) {
            self.places.settling.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Gives the running dispatch's place back, once (a second settle of the same attempt, as
/// after a refused compare-and-set, changes nothing). Outside a pool's dispatch: nothing.
pub(crate) fn give_back() {
    let _outside = PLACE.try_with(|place| {
        if !place.given_back.swap(true, Ordering::AcqRel) {
            place.places.settling.fetch_add(1, Ordering::AcqRel);
            place.places.freed.notify_one();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_place_is_given_back_once_and_counted_until_its_dispatch_ends() {
        let places = Arc::new(SettlingPlaces::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let watched = places.clone();
        let dispatch = tokio::spawn(SettlingPlaces::scope(places.clone(), async move {
            assert_eq!(watched.settling(), 0, "not settling before its settle");
            give_back();
            give_back();
            assert_eq!(watched.settling(), 1, "a second settle counts nothing more");
            rx.await.ok();
        }));
        places.freed().await;
        assert_eq!(places.settling(), 1, "counted while the settle waits");
        tx.send(()).ok();
        dispatch.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(places.settling(), 0, "not counted once the dispatch ended");
    }

    #[tokio::test]
    async fn a_dispatch_that_never_settles_gives_nothing_back() {
        let places = Arc::new(SettlingPlaces::default());
        SettlingPlaces::scope(places.clone(), async {}).await;
        give_back();
        assert_eq!(
            places.settling(),
            0,
            "outside a dispatch nothing is counted"
        );
        let freed = tokio::time::timeout(std::time::Duration::from_millis(20), places.freed());
        assert!(freed.await.is_err(), "no place was freed");
    }
}
