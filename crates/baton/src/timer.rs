//! Timer wheel (§2.9): a min-heap of deadlines with cancellation by tombstone.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::effect::TimerId;
use crate::time::Millis;

/// Pending timers ordered by deadline, FIFO among equal deadlines.
///
/// Cancelling leaves a tombstone in the heap (O(1)); the heap is compacted when tombstones
/// outnumber live entries, so a cancel-heavy workload (every result cancels its stale check)
/// does not grow memory without bound.
#[derive(Debug)]
pub struct TimerWheel<E> {
    heap: BinaryHeap<Reverse<(Millis, u64, TimerId)>>,
    /// Live timers with the sequence number of their current heap entry.
    live: HashMap<TimerId, (u64, E)>,
    seq: u64,
}

impl<E> Default for TimerWheel<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> TimerWheel<E> {
    /// An empty wheel.
    pub fn new() -> Self {
        TimerWheel {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            seq: 0,
        }
    }

    /// Schedule `event` at `at` under `id`; rescheduling an existing id replaces it.
    pub fn schedule(&mut self, id: TimerId, at: Millis, event: E) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, id)));
        self.live.insert(id, (self.seq, event));
    }

    /// Cancel a timer; true if it was still pending.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        let removed = self.live.remove(&id).is_some();
        if removed && self.heap.len() > 64 && self.heap.len() > 2 * self.live.len() {
            self.compact();
        }
        removed
    }

    /// Pending (non-cancelled) timers.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The earliest pending deadline, for the driver's sleep.
    pub fn next_deadline(&mut self) -> Option<Millis> {
        self.drop_dead_heads();
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Remove and return the earliest timer due at or before `now`.
    pub fn pop_due(&mut self, now: Millis) -> Option<(TimerId, E)> {
        self.drop_dead_heads();
        let Reverse((at, _, id)) = *self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        self.live.remove(&id).map(|(_, e)| (id, e))
    }

    /// Remove every pending timer in fire order (used at shutdown).
    pub fn drain(&mut self) -> Vec<(Millis, E)> {
        let mut out = Vec::with_capacity(self.live.len());
        while let Some(Reverse((at, seq, id))) = self.heap.pop() {
            if !self.is_live(id, seq) {
                continue;
            }
            if let Some((_, e)) = self.live.remove(&id) {
                out.push((at, e));
            }
        }
        out
    }

    fn drop_dead_heads(&mut self) {
        while let Some(Reverse((_, seq, id))) = self.heap.peek() {
            if self.is_live(*id, *seq) {
                break;
            }
            self.heap.pop();
        }
    }

    /// A heap entry is live when its id is pending and it is the id's newest entry
    /// (rescheduling an id leaves the older entry behind as a tombstone).
    fn is_live(&self, id: TimerId, seq: u64) -> bool {
        self.live.get(&id).is_some_and(|(s, _)| *s == seq)
    }

    fn compact(&mut self) {
        let mut heap = std::mem::take(&mut self.heap).into_vec();
        heap.retain(|Reverse((_, seq, id))| self.is_live(*id, *seq));
        let entries = heap;
        self.heap = entries.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_order_fifo_on_ties() {
        let mut w = TimerWheel::new();
        w.schedule(TimerId(1), Millis(30), "c");
        w.schedule(TimerId(2), Millis(10), "a");
        w.schedule(TimerId(3), Millis(10), "b");
        assert_eq!(w.next_deadline(), Some(Millis(10)));
        assert_eq!(w.pop_due(Millis(5)), None);
        assert_eq!(w.pop_due(Millis(10)), Some((TimerId(2), "a")));
        assert_eq!(w.pop_due(Millis(10)), Some((TimerId(3), "b")));
        assert_eq!(w.pop_due(Millis(10)), None);
        assert_eq!(w.pop_due(Millis(100)), Some((TimerId(1), "c")));
        assert!(w.is_empty());
    }

    #[test]
    fn cancelled_timers_never_fire_and_do_not_hold_the_deadline() {
        let mut w = TimerWheel::new();
        w.schedule(TimerId(1), Millis(10), 1);
        w.schedule(TimerId(2), Millis(20), 2);
        assert!(w.cancel(TimerId(1)));
        assert!(!w.cancel(TimerId(1)));
        assert_eq!(w.next_deadline(), Some(Millis(20)));
        assert_eq!(w.pop_due(Millis(50)), Some((TimerId(2), 2)));
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn rescheduling_an_id_moves_it() {
        let mut w = TimerWheel::new();
        w.schedule(TimerId(1), Millis(10), "old");
        w.schedule(TimerId(1), Millis(50), "new");
        assert_eq!(w.pop_due(Millis(20)), None);
        assert_eq!(w.pop_due(Millis(50)), Some((TimerId(1), "new")));
    }

    #[test]
    fn heavy_cancellation_compacts_the_heap() {
        let mut w = TimerWheel::new();
        for i in 0..10_000u64 {
            w.schedule(TimerId(i), Millis(i), i);
            if i > 0 {
                w.cancel(TimerId(i - 1));
            }
        }
        assert_eq!(w.len(), 1);
        assert!(w.heap.len() < 200, "heap kept {} tombstones", w.heap.len());
        assert_eq!(w.drain(), vec![(Millis(9_999), 9_999)]);
    }
}
