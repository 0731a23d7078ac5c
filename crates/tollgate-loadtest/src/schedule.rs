//! The open-loop schedule: when each client's requests are due, computed
//! from the start instant alone, never from how fast the server answers.
//!
//! Each client has its own arrival stream; [`Schedule`] merges them (and the
//! retries behaviours add) in time order, and stops at the bounds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::config::Arrivals;

/// What a due request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// An arrival of the client's own schedule.
    Scheduled,
    /// A retry of a refused request: `attempt` 1 is the first retry.
    /// `at_retry_after` marks one sent exactly at the time `Retry-After`
    /// named.
    Retry {
        /// 1 for the first retry.
        attempt: u32,
        /// Sent at `Retry-After` (the honour behaviour).
        at_retry_after: bool,
        /// Nothing else of the client's was in flight when the refusal
        /// came, so nothing but this retry can spend its key until it is
        /// answered: it must be admitted.
        clean: bool,
    },
}

/// One request to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Job {
    /// When, in ns from the start.
    pub due_ns: u64,
    /// Tie-break: order of creation.
    pub seq: u64,
    /// Which client.
    pub client: u32,
    /// Scheduled or a retry.
    pub kind: Kind,
}

/// One client's arrivals.
struct Stream {
    next_ns: u64,
    gap_ns: f64,
    poisson: Option<fastrand::Rng>,
    /// The exact time of the next arrival, kept in floating point so that
    /// rounding each gap to whole nanoseconds does not drift.
    exact_ns: f64,
    /// Constant arrivals: the first arrival's time and how many came, so
    /// that arrival `k` is at `phase + k * gap` with one rounding, not `k`.
    phase_ns: f64,
    count: u64,
}

impl Stream {
    fn advance(&mut self) {
        self.count += 1;
        self.exact_ns = match &mut self.poisson {
            // 1 - U is in (0, 1], so the logarithm is finite.
            Some(rng) => self.exact_ns - (1.0 - rng.f64()).ln() * self.gap_ns,
            None => self.phase_ns + self.count as f64 * self.gap_ns,
        };
        self.next_ns = self.exact_ns.round().min(u64::MAX as f64) as u64;
    }
}

/// Every client's arrivals and the pending retries, in time order.
pub struct Schedule {
    streams: Vec<Stream>,
    heap: BinaryHeap<Reverse<Job>>,
    seq: u64,
    end_ns: u64,
    remaining: u64,
    /// Scheduled arrivals handed out.
    pub offered: u64,
    /// Retries that would have been due after the end (not sent).
    pub retries_past_end: u64,
    /// Closed loop ([`Schedule::closed`]): the next client, round robin.
    closed: Option<u32>,
}

/// A 64-bit mix (SplitMix64's finaliser), so that client `i`'s stream does
/// not start where client `i + 1`'s does.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Schedule {
    /// `clients` streams of `rate` per second each, until `end_ns` (from the
    /// start) or `max_requests` scheduled arrivals, whichever comes first.
    pub fn new(
        clients: u32,
        rate: f64,
        arrivals: Arrivals,
        seed: u64,
        end_ns: u64,
        max_requests: u64,
    ) -> Self {
        let gap_ns = 1e9 / rate;
        let streams: Vec<Stream> = (0..clients)
            .map(|i| {
                let mut s = Stream {
                    next_ns: 0,
                    gap_ns,
                    poisson: None,
                    exact_ns: 0.0,
                    phase_ns: 0.0,
                    count: 0,
                };
                match arrivals {
                    // Phases spread over one gap.
                    Arrivals::Constant => {
                        s.phase_ns = gap_ns * i as f64 / clients as f64;
                        s.exact_ns = s.phase_ns;
                        s.next_ns = s.exact_ns.round() as u64;
                    }
                    Arrivals::Poisson => {
                        s.poisson = Some(fastrand::Rng::with_seed(mix(seed ^ mix(i as u64))));
                        s.advance();
                    }
                }
                s
            })
            .collect();
        let mut schedule = Schedule {
            heap: BinaryHeap::with_capacity(streams.len() * 2),
            streams,
            seq: 0,
            end_ns,
            remaining: max_requests,
            offered: 0,
            retries_past_end: 0,
            closed: None,
        };
        for client in 0..clients {
            schedule.queue_stream(client);
        }
        schedule
    }

    /// Closed loop: jobs for the clients in turn, all due at once, until
    /// `max_requests` (the caller stops at `end_ns`).
    pub fn closed(clients: u32, end_ns: u64, max_requests: u64) -> Self {
        let mut s = Self::new(0, 1.0, Arrivals::Constant, 0, end_ns, max_requests);
        s.streams.clear();
        s.closed = Some(clients.max(1));
        s
    }

    /// Whether this is a closed-loop schedule (nothing is ever late).
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    fn queue_stream(&mut self, client: u32) {
        let due_ns = self.streams[client as usize].next_ns;
        if due_ns < self.end_ns {
            self.push(Job {
                due_ns,
                seq: 0,
                client,
                kind: Kind::Scheduled,
            });
        }
    }

    fn push(&mut self, mut job: Job) {
        job.seq = self.seq;
        self.seq += 1;
        self.heap.push(Reverse(job));
    }

    /// Adds a retry; one due at or after the end is counted, not queued.
    pub fn retry(&mut self, job: Job) {
        if job.due_ns >= self.end_ns {
            self.retries_past_end += 1;
        } else {
            self.push(job);
        }
    }

    /// The next request due, or `None` when the schedule is over (pending
    /// retries still count: a later call may find one a response added).
    pub fn pop(&mut self) -> Option<Job> {
        if let Some(clients) = self.closed {
            if let Some(Reverse(retry)) = self.heap.pop() {
                return Some(retry);
            }
            if self.remaining == 0 {
                return None;
            }
            self.remaining -= 1;
            let client = (self.offered % clients as u64) as u32;
            self.offered += 1;
            return Some(Job {
                due_ns: 0,
                seq: 0,
                client,
                kind: Kind::Scheduled,
            });
        }
        loop {
            let Reverse(job) = self.heap.pop()?;
            if job.kind != Kind::Scheduled {
                return Some(job);
            }
            if self.remaining == 0 {
                // The count bound is reached: the streams end; retries left
                // in the heap are still served.
                continue;
            }
            self.remaining -= 1;
            self.offered += 1;
            let stream = &mut self.streams[job.client as usize];
            stream.advance();
            self.queue_stream(job.client);
            return Some(job);
        }
    }

    /// Takes back the scheduled request of a closed loop [`Schedule::pop`]
    /// just counted, when the run ended before it could be sent.
    pub fn give_back(&mut self) {
        self.offered = self.offered.saturating_sub(1);
        self.remaining = self.remaining.saturating_add(1);
    }

    /// The end of the schedule, ns from the start.
    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut Schedule) -> Vec<Job> {
        std::iter::from_fn(|| s.pop()).collect()
    }

    #[test]
    fn constant_arrivals_are_exact_and_in_order() {
        // 4 clients at 10/s for 2 s: 80 arrivals, 25 ms apart overall.
        let mut s = Schedule::new(4, 10.0, Arrivals::Constant, 1, 2_000_000_000, u64::MAX);
        let jobs = drain(&mut s);
        assert_eq!(jobs.len(), 80);
        assert_eq!(s.offered, 80);
        assert!(jobs.windows(2).all(|w| w[0].due_ns <= w[1].due_ns));
        assert_eq!(jobs[1].due_ns - jobs[0].due_ns, 25_000_000);
        assert!(jobs.iter().all(|j| j.due_ns < 2_000_000_000));
    }

    #[test]
    fn constant_arrivals_do_not_drift_across_the_end() {
        // 12/s: the 19th arrival is at 1.5 s exactly, which is the end.
        let mut s = Schedule::new(4, 12.0, Arrivals::Constant, 1, 1_500_000_000, u64::MAX);
        assert_eq!(drain(&mut s).len(), 72);
        let mut s = Schedule::new(3, 7.0, Arrivals::Constant, 1, 1_000_000_000_000, u64::MAX);
        assert_eq!(drain(&mut s).len(), 21_000);
    }

    #[test]
    fn the_count_bound_stops_first() {
        let mut s = Schedule::new(3, 100.0, Arrivals::Poisson, 9, u64::MAX, 50);
        assert_eq!(drain(&mut s).len(), 50);
    }

    #[test]
    fn poisson_is_seeded_and_near_its_rate() {
        let run = |seed| {
            let mut s = Schedule::new(5, 20.0, Arrivals::Poisson, seed, 100_000_000_000, u64::MAX);
            drain(&mut s)
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        // 10 000 expected; a Poisson count's deviation is 100.
        assert!((9_500..10_500).contains(&a.len()), "{}", a.len());
    }

    #[test]
    fn retries_come_in_time_order_and_not_past_the_end() {
        let mut s = Schedule::new(1, 1.0, Arrivals::Constant, 1, 3_000_000_000, u64::MAX);
        let first = s.pop().unwrap();
        assert_eq!(first.due_ns, 0);
        let retry = |due_ns| Job {
            due_ns,
            seq: 0,
            client: 0,
            kind: Kind::Retry {
                attempt: 1,
                at_retry_after: true,
                clean: true,
            },
        };
        s.retry(retry(500_000_000));
        s.retry(retry(5_000_000_000));
        assert_eq!(s.retries_past_end, 1);
        let next = s.pop().unwrap();
        assert_eq!(
            (next.due_ns, next.kind != Kind::Scheduled),
            (500_000_000, true)
        );
        assert_eq!(drain(&mut s).len(), 2);
    }

    #[test]
    fn closed_loop_takes_the_clients_in_turn() {
        let mut s = Schedule::closed(3, u64::MAX, 7);
        let clients: Vec<u32> = drain(&mut s).iter().map(|j| j.client).collect();
        assert_eq!(clients, [0, 1, 2, 0, 1, 2, 0]);
        assert!(s.is_closed());
    }
}
