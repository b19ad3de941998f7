//! The tokio driver: owns a [`BatonCore`], an inbox and a [`TimerWheel`], and carries out the
//! core's effects through a [`BatonHost`] (architecture invariant 4: one task mutates state,
//! musicians and timers only send events).

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use crate::core::BatonCore;
use crate::effect::{AttemptContext, Effect, JobOutcome, ObserverEvent, StateChange};
use crate::event::Event;
use crate::spec::SkipSpec;
use crate::time::AnchoredClock;
use crate::timer::TimerWheel;

/// Sender half of the baton inbox; musicians report results through it.
pub type Inbox = UnboundedSender<Event>;

/// Work to run on the baton task with the host: how other tasks read or change state the
/// host owns (architecture invariant 4 — one task owns it, everyone else sends messages).
pub type HostCall<H> = Box<dyn FnOnce(&mut H) + Send>;

/// Sender of [`HostCall`]s. A call sent before an event (from the same task) runs before the
/// baton handles that event: the driver drains the calls before each event it takes.
pub type HostCaller<H> = UnboundedSender<HostCall<H>>;

/// An error the host reports, typically a failed checkpoint write.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}: {message}")]
pub struct HostError {
    /// What the host was doing (e.g. "saving checkpoint of job 'x'").
    pub context: String,
    /// The underlying error, rendered.
    pub message: String,
}

impl HostError {
    /// Build from any error with context.
    pub fn new(context: impl Into<String>, error: impl std::fmt::Display) -> Self {
        HostError {
            context: context.into(),
            message: error.to_string(),
        }
    }
}

/// Errors of the driver itself.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The baton loop is gone (shut down or crashed), so the event could not be delivered.
    #[error("the baton loop is not running; could not deliver {event}")]
    Closed {
        /// Observer name of the undelivered event.
        event: &'static str,
    },
    /// The driver task panicked or was aborted.
    #[error("the baton driver task failed: {0}")]
    Join(String),
}

/// What the conductor provides to the baton loop. Every method runs on the baton task, so it
/// must not block for long: spawn musicians and skip evaluations as tokio tasks.
pub trait BatonHost: Send + 'static {
    /// Durably save a change before its consequences happen (invariant 1). An error stops
    /// dispatching for that job; the baton never continues as if the change were saved.
    fn persist(&mut self, change: &StateChange) -> Result<(), HostError>;

    /// Save the changes of one burst of events, in order, before any of their consequences;
    /// one result per change. A host may make them durable together (one transaction), but
    /// must not return before they are. Once a change of a job fails, later changes of that
    /// job must not be saved (they are reported failed too).
    fn persist_all(&mut self, changes: &[&StateChange]) -> Vec<Result<(), HostError>> {
        persist_in_order(changes, |change| self.persist(change))
    }

    /// Start a musician for one attempt; it must eventually send
    /// [`Event::SheetAttemptResult`] (echoing `attempt.dispatch_id`) into `inbox`.
    fn dispatch(&mut self, job_id: &str, sheet_num: u32, attempt: AttemptContext, inbox: Inbox);

    /// Kill the in-flight attempt of a sheet (process group: TERM, grace, KILL).
    fn kill(&mut self, job_id: &str, sheet_num: u32);

    /// The job is over; its final state was persisted just before.
    fn job_finished(&mut self, job_id: &str, outcome: JobOutcome, reason: Option<&str>);

    /// Evaluate `skip_when` / `skip_when_command` and answer with [`Event::SkipEvaluated`].
    fn evaluate_skip(&mut self, job_id: &str, sheet_num: u32, rule: &SkipSpec, inbox: Inbox);

    /// A sheet entered a fermata; someone must answer with [`Event::EscalationResolved`]
    /// (or the escalation timeout fails the sheet).
    fn escalate(&mut self, job_id: &str, sheet_num: u32, reason: &str);

    /// A change could not be saved; dispatching for `job_id` has stopped.
    fn persistence_failed(&mut self, job_id: Option<&str>, error: &HostError);

    /// The job is over in the baton, but the changes that ended it could not be saved
    /// ([`BatonHost::job_finished`] is not called): the host keeps the end to record once
    /// saving works again. The baton has let go of the job. Default: nothing.
    fn job_finished_unsaved(&mut self, _job_id: &str, _outcome: JobOutcome, _reason: Option<&str>) {
    }

    /// Observer stream (status displays, event bus); the event is handed over, so a host
    /// that keeps it need not copy it. Default: ignore.
    fn observe(&mut self, _event: ObserverEvent) {}
}

/// Save `changes` in order with `save`, one result per change; once a change of a job fails,
/// its later changes are not saved but reported failed (the rule of
/// [`BatonHost::persist_all`], for hosts that implement it themselves).
pub fn persist_in_order(
    changes: &[&StateChange],
    mut save: impl FnMut(&StateChange) -> Result<(), HostError>,
) -> Vec<Result<(), HostError>> {
    persist_in_order_or(
        changes,
        |change, saving| {
            if saving {
                save(change)
            } else {
                Ok(())
            }
        },
    )
}

/// [`persist_in_order`] for a host that shows state from memory: `apply(change, true)`
/// applies and saves a change; a change it must not save (an earlier change of its job
/// failed) is still handed over, as `apply(change, false)`, to be taken in memory only.
pub fn persist_in_order_or(
    changes: &[&StateChange],
    mut apply: impl FnMut(&StateChange, bool) -> Result<(), HostError>,
) -> Vec<Result<(), HostError>> {
    let mut failed: Vec<&str> = Vec::new();
    changes
        .iter()
        .map(|change| {
            let job = change.job_id();
            if let Some(job) = job.filter(|j| failed.contains(j)) {
                let _ = apply(change, false);
                return Err(HostError::new(
                    format!("saving a change of job '{job}'"),
                    "an earlier change of this job could not be saved",
                ));
            }
            let result = apply(change, true);
            if let (Err(_), Some(job)) = (&result, job) {
                failed.push(job);
            }
            result
        })
        .collect()
}

/// Handle on a running baton loop.
#[derive(Debug)]
pub struct BatonHandle<H> {
    inbox: Inbox,
    calls: HostCaller<H>,
    task: JoinHandle<H>,
}

impl<H> BatonHandle<H> {
    /// Deliver an event to the baton.
    pub fn send(&self, event: Event) -> Result<(), DriverError> {
        self.inbox.send(event).map_err(|e| DriverError::Closed {
            event: e.0.observer_name(),
        })
    }

    /// A sender for the inbox (for musicians, signal handlers, the IPC layer).
    pub fn inbox(&self) -> Inbox {
        self.inbox.clone()
    }

    /// A sender of calls that run on the baton task with the host.
    pub fn caller(&self) -> HostCaller<H> {
        self.calls.clone()
    }

    /// Wait for the loop to end (after [`Event::ShutdownRequested`]) and get the host back.
    pub async fn join(self) -> Result<H, DriverError> {
        self.task
            .await
            .map_err(|e| DriverError::Join(e.to_string()))
    }
}

/// Spawn the baton loop on the current tokio runtime.
///
/// The loop ends after a non-graceful shutdown at once, or after a graceful one when no sheet
/// is in flight any more.
pub fn spawn<H: BatonHost>(core: BatonCore, host: H) -> BatonHandle<H> {
    let (tx, rx) = unbounded_channel();
    let (calls, calls_rx) = unbounded_channel();
    let task = tokio::spawn(run(core, host, rx, calls_rx, tx.clone()));
    BatonHandle {
        inbox: tx,
        calls,
        task,
    }
}

/// Run every call already queued, in order.
fn drain_calls<H>(host: &mut H, calls: &mut UnboundedReceiver<HostCall<H>>) {
    while let Ok(call) = calls.try_recv() {
        call(host);
    }
}

/// Most events handled before their effects are carried out together.
const MAX_BURST: usize = 256;

async fn run<H: BatonHost>(
    mut core: BatonCore,
    mut host: H,
    mut rx: UnboundedReceiver<Event>,
    mut calls: UnboundedReceiver<HostCall<H>>,
    tx: Inbox,
) -> H {
    let clock = AnchoredClock::new();
    let mut wheel: TimerWheel<Event> = TimerWheel::new();
    let mut effects = Vec::with_capacity(64);
    let mut hard_stop = false;
    // Kick once so restored instrument rate limits get their expiry timers.
    let mut pending = Some(Event::DispatchRetry);
    loop {
        if let Some(event) = pending.take() {
            // Handle what else is already queued with it, so that the whole burst is saved
            // in one go (the host may commit it as one transaction) before its consequences.
            let mut next = Some(event);
            let mut burst = 0;
            while let Some(event) = next.take() {
                // What was sent before the event is in place before the event is handled.
                drain_calls(&mut host, &mut calls);
                if matches!(event, Event::ShutdownRequested { graceful: false }) {
                    hard_stop = true;
                }
                core.handle(event, clock.now(), &mut effects);
                burst += 1;
                if burst < MAX_BURST {
                    next = rx.try_recv().ok();
                }
            }
            carry_out(&mut core, &mut host, &mut wheel, &tx, &mut effects);
        }
        loop {
            let mut due = false;
            while let Some((_, event)) = wheel.pop_due(clock.now()) {
                core.handle(event, clock.now(), &mut effects);
                due = true;
            }
            if !due {
                break;
            }
            carry_out(&mut core, &mut host, &mut wheel, &tx, &mut effects);
        }
        if hard_stop || (core.is_shutting_down() && core.in_flight() == 0) {
            break;
        }
        let deadline = wheel.next_deadline().map(|at| clock.instant_of(at));
        tokio::select! {
            received = rx.recv() => match received {
                Some(event) => pending = Some(event),
                None => break,
            },
            Some(call) = calls.recv() => {
                call(&mut host);
                drain_calls(&mut host, &mut calls);
            }
            () = sleep_until(deadline), if deadline.is_some() => {}
        }
    }
    host
}

async fn sleep_until(deadline: Option<std::time::Instant>) {
    if let Some(at) = deadline {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

/// Carry out a burst's effects: first every state change is saved (all before any
/// consequence, invariant 1), then the rest in order. After a failed save, nothing else of
/// that job in this burst happens except kills and timer bookkeeping (never continue as if
/// saved).
fn carry_out<H: BatonHost>(
    core: &mut BatonCore,
    host: &mut H,
    wheel: &mut TimerWheel<Event>,
    tx: &Inbox,
    effects: &mut Vec<Effect>,
) {
    let mut failed_jobs: Vec<String> = Vec::new();
    let changes: Vec<&StateChange> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(change) => Some(change),
            _ => None,
        })
        .collect();
    if !changes.is_empty() {
        let results = host.persist_all(&changes);
        for (change, result) in changes.iter().zip(results) {
            let Err(error) = result else { continue };
            let job = change.job_id().map(str::to_owned);
            if job
                .as_ref()
                .is_some_and(|j| failed_jobs.iter().any(|f| f == j))
            {
                continue;
            }
            tracing::error!(%error, "baton: persisting state failed");
            host.persistence_failed(job.as_deref(), &error);
            if let Some(job) = job {
                core.persistence_failed(&job);
                failed_jobs.push(job);
            }
        }
    }
    for effect in effects.drain(..) {
        let blocked = effect
            .job_id()
            .is_some_and(|job| failed_jobs.iter().any(|f| f == job));
        match effect {
            Effect::Persist(_) => {}
            Effect::Dispatch {
                job_id,
                sheet_num,
                attempt,
            } => {
                if blocked {
                    for follow_up in core.dispatch_not_started(&job_id, sheet_num) {
                        if let Effect::CancelTimer { id } = follow_up {
                            wheel.cancel(id);
                        }
                    }
                } else {
                    host.dispatch(&job_id, sheet_num, attempt, tx.clone());
                }
            }
            Effect::Kill { job_id, sheet_num } => host.kill(&job_id, sheet_num),
            Effect::ScheduleTimer { id, at, event } => wheel.schedule(id, at, event),
            Effect::CancelTimer { id } => {
                wheel.cancel(id);
            }
            Effect::EvaluateSkip {
                job_id,
                sheet_num,
                rule,
            } => {
                if !blocked {
                    host.evaluate_skip(&job_id, sheet_num, &rule, tx.clone());
                }
            }
            Effect::Escalate {
                job_id,
                sheet_num,
                reason,
            } => {
                if !blocked {
                    host.escalate(&job_id, sheet_num, &reason);
                }
            }
            Effect::JobFinished {
                job_id,
                outcome,
                reason,
            } => {
                if blocked {
                    host.job_finished_unsaved(&job_id, outcome, reason.as_deref());
                } else {
                    host.job_finished(&job_id, outcome, reason.as_deref());
                }
            }
            Effect::Observer(event) => host.observe(event),
        }
    }
}
