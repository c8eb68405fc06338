//! A flight's answer, and the waiters of it: set once when the flight
//! lands, read by every waiter without a lock.
//!
//! A herd is thousands of waiters on one answer, so a waiter costs what
//! it must and no more: a slot in one vector for its waker (registered
//! under a short lock, all of them taken in one move when the answer is
//! set and woken after the lock is released: no O(n) work under it), and
//! the answer read back from a `OnceLock` (a load, not a lock).
//!
//! A fetch's own timeout ([`Error::Timeout`]) would cost a timer per
//! waiter (a registration and a removal in the runtime's timer wheel,
//! behind one lock for the whole runtime). Instead only one waiter of an
//! answer holds a timer at a time: the one with the earliest deadline (the
//! *alarm*); the others wait in deadline order. When the alarm's holder
//! leaves (its deadline passed, or it was dropped) it hands the alarm to
//! the next deadline, whose waiter arms its own timer; a waiter arriving
//! with an earlier deadline than the alarm's arms one too. So every waiter
//! still gives up at its own deadline, and a herd answered in time costs
//! one timer, not one per waiter.
//!
//! The answer also knows whether anybody still waits for it, for the
//! loader's [`LoadToken`](crate::LoadToken): nobody does once it is set
//! (a stale value at the soft timeout counts), or once no waiter holds a
//! slot and no caller holds the answer otherwise (the caller driving the
//! flight, a batch's waiters yet to poll: see [`Leading`]). Its watchers
//! are woken then; a flight no loader watches keeps none.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

use crate::error::Error;
use crate::sync::{Mutex, MutexGuard};
use crate::table::fetched::Fetched;

type Outcome<T> = Result<Fetched<T>, Error>;

/// What a flight answers, and who waits for it.
pub(crate) struct Answer<T> {
    outcome: OnceLock<Outcome<T>>,
    waiters: Mutex<Waiters>,
    /// The runtime whose timer wakes a waiter polled outside any runtime.
    runtime: Handle,
}

#[derive(Default)]
struct Waiters {
    /// Set with the outcome: the wakers are taken, and no more register.
    answered: bool,
    /// The waiters, by slot.
    slots: Vec<Slot>,
    /// Slots freed by waiters that left.
    free: Vec<usize>,
    /// Waiters with a deadline and no timer, earliest first: (deadline,
    /// slot, the slot's turn). An entry whose waiter left, or took the
    /// alarm, is skipped when it comes up (a heap is one vector: a herd's
    /// entries cost a few allocations, not a tree's nodes).
    queue: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// Entries of the queue to skip.
    stale: usize,
    /// The holder of the alarm: its deadline, its slot. Every live queued
    /// deadline is at or after its deadline.
    alarm: Option<(Instant, usize)>,
    /// Callers that wait without a slot (see [`Leading`]).
    held: usize,
    /// The wakers of the loader's token, woken once nobody waits.
    watchers: Vec<Waker>,
}

/// A waiter's place.
#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    /// Bumped when the slot is freed: tells the entries of its past
    /// waiters from its present one's.
    turn: u64,
    /// Whether its waiter has a live entry in the queue.
    queued: bool,
}

impl Waiters {
    /// Whether nobody waits for the answer: it is set, or no caller holds
    /// it and every slot is free.
    fn unwaited(&self) -> bool {
        self.answered || (self.held == 0 && self.slots.len() == self.free.len())
    }

    /// The watchers to wake, if nobody waits now.
    fn watchers_if_unwaited(&mut self) -> Vec<Waker> {
        if self.watchers.is_empty() || !self.unwaited() {
            return Vec::new();
        }
        std::mem::take(&mut self.watchers)
    }

    /// Takes the next live entry of the queue as the alarm; the waker of
    /// its waiter, to wake so that it arms its timer.
    fn hand_over(&mut self) -> Option<Waker> {
        self.alarm = None;
        while let Some(Reverse((deadline, slot, turn))) = self.queue.pop() {
            let next = &mut self.slots[slot];
            if next.turn == turn && next.queued {
                next.queued = false;
                self.alarm = Some((deadline, slot));
                return next.waker.clone();
            }
            self.stale = self.stale.saturating_sub(1);
        }
        None
    }

    /// Its entry in the queue is to skip: once skipped entries are half
    /// the queue, they are dropped (a long flight whose waiters come and
    /// go keeps a queue of the waiters it has).
    fn unqueue(&mut self, slot: usize) {
        self.slots[slot].queued = false;
        self.stale += 1;
        if self.stale > 32 && self.stale > self.queue.len() / 2 {
            let slots = &self.slots;
            self.queue.retain(|Reverse((_, slot, turn))| {
                slots[*slot].turn == *turn && slots[*slot].queued
            });
            self.stale = 0;
        }
    }
}

impl<T> Answer<T> {
    /// An answer to come; `runtime`'s timer wakes waiters polled outside
    /// any runtime.
    pub(crate) fn new(runtime: Handle) -> Answer<T> {
        Answer {
            outcome: OnceLock::new(),
            waiters: Mutex::new(Waiters::default()),
            runtime,
        }
    }

    /// A caller that held the answer without a slot let go of it.
    fn let_go(&self) {
        let woken = {
            let mut waiters = self.waiters();
            waiters.held = waiters.held.saturating_sub(1);
            waiters.watchers_if_unwaited()
        };
        woken.into_iter().for_each(Waker::wake);
    }

    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers every waiter, once (a second outcome is dropped). The wakers
    /// are taken under the lock and woken after it.
    pub(crate) fn set(&self, outcome: Outcome<T>) {
        let _ = self.outcome.set(outcome);
        let left = std::mem::replace(
            &mut *self.waiters(),
            Waiters {
                answered: true,
                ..Waiters::default()
            },
        );
        for waker in left.slots.into_iter().filter_map(|slot| slot.waker) {
            waker.wake();
        }
        left.watchers.into_iter().for_each(Waker::wake);
    }

    /// The outcome, once set.
    fn get(&self) -> Option<Outcome<T>> {
        self.outcome.get().cloned()
    }
}

/// What the loader's token sees of a flight: whether anybody waits for its
/// answer.
pub(crate) trait Watched: Send + Sync {
    /// Whether nobody waits; if somebody does, `waker` is woken once
    /// nobody does.
    fn poll_unwaited(&self, waker: &Waker) -> bool;
    /// Whether nobody waits.
    fn is_unwaited(&self) -> bool;
}

impl<T: Send + Sync> Watched for Answer<T> {
    fn poll_unwaited(&self, waker: &Waker) -> bool {
        let mut waiters = self.waiters();
        if waiters.unwaited() {
            return true;
        }
        if !waiters.watchers.iter().any(|known| known.will_wake(waker)) {
            waiters.watchers.push(waker.clone());
        }
        false
    }

    fn is_unwaited(&self) -> bool {
        self.waiters().unwaited()
    }
}

/// A caller waiting for an answer without a slot among its waiters: the
/// one driving the flight (it polls the flight, not the answer), a batch's
/// waiters that poll their answers one after another. While it lives the
/// answer is waited for; when it is dropped (the caller was answered, gave
/// up or was dropped) the answer knows it.
pub(crate) struct Leading<T>(Arc<Answer<T>>);

impl<T> Leading<T> {
    pub(crate) fn new(answer: Arc<Answer<T>>) -> Leading<T> {
        answer.waiters().held += 1;
        Leading(answer)
    }
}

impl<T> Drop for Leading<T> {
    fn drop(&mut self) {
        self.0.let_go();
    }
}

/// A waiter of an [`Answer`]: the answer, or [`Error::Timeout`] once its
/// deadline (`timeout` after its first poll) has passed.
pub(crate) struct Wait<T> {
    answer: Arc<Answer<T>>,
    /// For its timeout error.
    table: &'static str,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    /// Its slot among the waiters, while it waits.
    slot: Option<usize>,
    /// Its timer, if it holds (or held) the alarm.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> Wait<T> {
    pub(crate) fn new(
        answer: Arc<Answer<T>>,
        table: &'static str,
        timeout: Option<Duration>,
    ) -> Wait<T> {
        Wait {
            answer,
            table,
            timeout,
            deadline: None,
            slot: None,
            timer: None,
        }
    }

    /// Now, on the runtime's clock (the current one's, or outside any
    /// the answer's: a paused clock is then still the one that counts).
    fn now(&self) -> Instant {
        if tokio::task::try_id().is_some() || Handle::try_current().is_ok() {
            Instant::now()
        } else {
            let _entered = self.answer.runtime.enter();
            Instant::now()
        }
    }

    /// A timer to `deadline`, on the current runtime or the answer's.
    fn timer(&self, deadline: Instant) -> Pin<Box<Sleep>> {
        if Handle::try_current().is_ok() {
            Box::pin(tokio::time::sleep_until(deadline))
        } else {
            let _entered = self.answer.runtime.enter();
            Box::pin(tokio::time::sleep_until(deadline))
        }
    }

    /// Leaves the waiters: frees its slot, and hands the alarm to the next
    /// deadline if it held it.
    fn leave(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let (next, mine, watchers) = {
            let mut waiters = self.answer.waiters();
            if waiters.answered {
                return;
            }
            let waiters = &mut *waiters;
            if waiters.slots[slot].queued {
                waiters.unqueue(slot);
            }
            let place = &mut waiters.slots[slot];
            let mine = place.waker.take();
            place.turn += 1;
            waiters.free.push(slot);
            let holder = waiters.alarm.is_some_and(|(_, holder)| holder == slot);
            let next = holder.then(|| waiters.hand_over()).flatten();
            (next, mine, waiters.watchers_if_unwaited())
        };
        drop(mine);
        if let Some(next) = next {
            next.wake();
        }
        watchers.into_iter().for_each(Waker::wake);
    }

    /// Gives up: its deadline passed.
    fn timed_out(&mut self) -> Poll<Outcome<T>> {
        self.leave();
        Poll::Ready(Err(Error::Timeout {
            table: self.table,
            after: self.timeout.unwrap_or_default(),
        }))
    }

    /// Registers `waker` in its slot, and takes its place among the
    /// deadlines; whether it must arm its timer (it holds the alarm and has
    /// none). `None` if the answer is there.
    fn register(&mut self, waker: &Waker) -> Option<bool> {
        let mut replaced = None;
        let arm = {
            let mut waiters = self.answer.waiters();
            if waiters.answered {
                return None;
            }
            let waiters = &mut *waiters;
            let slot = if let Some(slot) = self.slot {
                slot
            } else {
                let slot = waiters.free.pop().unwrap_or(waiters.slots.len());
                if slot == waiters.slots.len() {
                    waiters.slots.push(Slot::default());
                }
                self.slot = Some(slot);
                slot
            };
            let place = &mut waiters.slots[slot];
            if !place.waker.as_ref().is_some_and(|old| old.will_wake(waker)) {
                replaced = place.waker.replace(waker.clone());
            }
            match (self.deadline, waiters.alarm) {
                (None, _) => false,
                (Some(_), _) if self.timer.is_some() => false,
                // Handed over: it was taken from the queue.
                (Some(_), Some((_, holder))) if holder == slot => true,
                (Some(deadline), Some((at, _))) if at <= deadline => {
                    if !place.queued {
                        place.queued = true;
                        let turn = place.turn;
                        waiters.queue.push(Reverse((deadline, slot, turn)));
                    }
                    false
                }
                // The earliest deadline: it takes the alarm.
                (Some(deadline), _) => {
                    if place.queued {
                        waiters.unqueue(slot);
                    }
                    waiters.alarm = Some((deadline, slot));
                    true
                }
            }
        };
        drop(replaced);
        Some(arm)
    }
}

impl<T> Future for Wait<T> {
    type Output = Outcome<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<T>> {
        let this = self.get_mut();
        if let Some(outcome) = this.answer.get() {
            // Every waiter is woken with the outcome: nothing to leave.
            this.slot = None;
            return Poll::Ready(outcome);
        }
        if this.deadline.is_none()
            && let Some(after) = this.timeout
        {
            this.deadline = Some(this.now() + after);
        }
        if let Some(timer) = &mut this.timer
            && timer.as_mut().poll(cx).is_ready()
        {
            return this.timed_out();
        }
        match this.register(cx.waker()) {
            None => {
                this.slot = None;
                Poll::Ready(this.answer.get().expect("answered"))
            }
            Some(false) => Poll::Pending,
            Some(true) => {
                let mut timer = this.timer(this.deadline.expect("a deadline"));
                let rang = timer.as_mut().poll(cx).is_ready();
                this.timer = Some(timer);
                if rang {
                    // The answer may have come meanwhile: it wins.
                    if let Some(outcome) = this.answer.get() {
                        this.slot = None;
                        return Poll::Ready(outcome);
                    }
                    return this.timed_out();
                }
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Wait<T> {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(all(test, not(echo_cache_loom)))]
mod tests {
    use super::*;
    use crate::table::fetched::Source;

    fn answer() -> Arc<Answer<u64>> {
        Arc::new(Answer::new(Handle::current()))
    }

    /// Waiters of `answer`, one task each, with these timeouts (ms).
    fn waiters(
        answer: &Arc<Answer<u64>>,
        timeouts: &[Option<u64>],
    ) -> Vec<tokio::task::JoinHandle<Outcome<u64>>> {
        (timeouts.iter())
            .map(|ms| {
                let wait = Wait::new(Arc::clone(answer), "t", ms.map(Duration::from_millis));
                tokio::spawn(wait)
            })
            .collect()
    }

    fn finished(waiters: &[tokio::task::JoinHandle<Outcome<u64>>]) -> Vec<bool> {
        waiters
            .iter()
            .map(tokio::task::JoinHandle::is_finished)
            .collect()
    }

    /// On a paused clock, so every deadline is exact: each waiter gives up
    /// at its own deadline, whether it took the alarm from an earlier
    /// waiter (20 ms after 50 ms), waited in the queue behind it (the
    /// second 20 ms, 30 ms) or had it handed over; the one without a
    /// timeout gets the answer.
    #[tokio::test(start_paused = true)]
    async fn every_waiter_gives_up_at_its_own_deadline() {
        let answer = answer();
        let timeouts = [Some(50), Some(20), Some(20), Some(30), None];
        let waiters = waiters(&answer, &timeouts);
        tokio::task::yield_now().await;
        let at = |ms| tokio::time::sleep(Duration::from_millis(ms));
        at(19).await;
        assert_eq!(finished(&waiters), [false; 5]);
        at(2).await; // 21 ms
        assert_eq!(finished(&waiters), [false, true, true, false, false]);
        at(10).await; // 31 ms
        assert_eq!(finished(&waiters), [false, true, true, true, false]);
        at(20).await; // 51 ms
        assert_eq!(finished(&waiters), [true, true, true, true, false]);
        answer.set(Ok(Fetched::new(Arc::new(7), Source::Fill, 1)));
        let mut outcomes = Vec::new();
        for waiter in waiters {
            outcomes.push(waiter.await.expect("no waiter panics"));
        }
        for (outcome, timeout) in outcomes.iter().zip(timeouts) {
            match (outcome, timeout) {
                (Err(Error::Timeout { after, .. }), Some(ms)) => {
                    assert_eq!(*after, Duration::from_millis(ms));
                }
                (Ok(fetched), None) => assert_eq!(**fetched.value(), 7),
                (outcome, timeout) => panic!(
                    "timeout {timeout:?}: {}",
                    outcome
                        .as_ref()
                        .err()
                        .map_or("a value".into(), ToString::to_string)
                ),
            }
        }
    }

    /// The holder of the alarm that leaves (its task aborted) hands it
    /// over: the next waiter still gives up at its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_holder_that_leaves_hands_the_alarm_over() {
        let answer = answer();
        let waiters = waiters(&answer, &[Some(20), Some(40)]);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        waiters[0].abort();
        tokio::time::sleep(Duration::from_millis(34)).await; // 39 ms
        assert!(!waiters[1].is_finished());
        tokio::time::sleep(Duration::from_millis(2)).await; // 41 ms
        assert!(waiters[1].is_finished());
        answer.set(Err(Error::NoRuntime));
    }

    /// Queued waiters that leave are skipped, and once they are most of
    /// the queue, dropped from it: a long flight keeps no more than the
    /// waiters it has.
    #[tokio::test(start_paused = true)]
    async fn waiters_that_leave_do_not_pile_up_in_the_queue() {
        let answer = answer();
        let waiters = waiters(&answer, &[Some(10_000); 200]);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        for waiter in &waiters[50..] {
            waiter.abort();
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        {
            let state = answer.waiters();
            let live = (state.slots.iter()).filter(|slot| slot.queued).count();
            assert_eq!(live, 49, "the holder and 49 queued are left");
            assert!(state.queue.len() < 100, "{} entries", state.queue.len());
            assert_eq!(state.free.len(), 150);
        }
        answer.set(Err(Error::NoRuntime));
    }

    /// A herd with one timeout answered in time: one waiter holds the
    /// alarm (one timer), the rest wait in the queue; the answer reaches
    /// all, and leaves no waker behind.
    #[tokio::test(start_paused = true)]
    async fn a_herd_answered_in_time_arms_one_timer() {
        let answer = answer();
        let waiters = waiters(&answer, &[Some(10_000); 100]);
        // The scheduler polls a few dozen tasks between two of the test's.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        {
            let state = answer.waiters();
            assert!(state.alarm.is_some());
            assert_eq!((state.queue.len(), state.slots.len()), (99, 100));
        }
        answer.set(Ok(Fetched::new(Arc::new(3), Source::Fill, 1)));
        for waiter in waiters {
            let fetched = waiter.await.expect("no panic").expect("answered");
            assert_eq!(**fetched.value(), 3);
        }
        let state = answer.waiters();
        assert!(state.answered && state.slots.is_empty() && state.queue.is_empty());
    }
}

#[cfg(all(test, echo_cache_loom))]
mod model {
    //! Run with `RUSTFLAGS="--cfg echo_cache_loom" cargo test -p echo-cache --lib model`.
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::Wake;

    use super::*;
    use crate::table::fetched::Source;

    /// A waker that remembers it was woken.
    #[derive(Default)]
    struct Flag(loom::sync::atomic::AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, SeqCst);
        }
    }

    /// A waiter polled while the answer is set, in every interleaving: it
    /// has the answer at once, or it is woken and has it at its next poll
    /// (a wakeup is never lost between its look and its registration).
    #[test]
    fn a_waiter_is_never_left_behind() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        loom::model(move || {
            let answer = Arc::new(Answer::<u64>::new(handle.clone()));
            let setter = {
                let answer = Arc::clone(&answer);
                loom::thread::spawn(move || {
                    answer.set(Ok(Fetched::new(Arc::new(5), Source::Fill, 1)));
                })
            };
            let flag = Arc::new(Flag::default());
            let waker = Waker::from(Arc::clone(&flag));
            let mut wait = Wait::new(Arc::clone(&answer), "t", None);
            let first = Pin::new(&mut wait).poll(&mut Context::from_waker(&waker));
            setter.join().unwrap();
            let answered = match first {
                Poll::Ready(answered) => answered,
                Poll::Pending => {
                    assert!(flag.0.load(SeqCst), "a pending waiter was not woken");
                    match Pin::new(&mut wait).poll(&mut Context::from_waker(&waker)) {
                        Poll::Ready(answered) => answered,
                        Poll::Pending => panic!("woken without the answer"),
                    }
                }
            };
            assert_eq!(**answered.expect("the value").value(), 5);
        });
    }
}
