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

/// An error the host reports, typically a failed checkpoint write.
#[derive(Debug, thiserror::Error)]
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

    /// Observer stream (status displays, event bus). Default: ignore.
    fn observe(&mut self, _event: &ObserverEvent) {}
}

/// Handle on a running baton loop.
#[derive(Debug)]
pub struct BatonHandle<H> {
    inbox: Inbox,
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
    let task = tokio::spawn(run(core, host, rx, tx.clone()));
    BatonHandle { inbox: tx, task }
}

async fn run<H: BatonHost>(
    mut core: BatonCore,
    mut host: H,
    mut rx: UnboundedReceiver<Event>,
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
            if matches!(event, Event::ShutdownRequested { graceful: false }) {
                hard_stop = true;
            }
            core.handle(event, clock.now(), &mut effects);
            carry_out(&mut core, &mut host, &mut wheel, &tx, &mut effects);
        }
        while let Some((_, event)) = wheel.pop_due(clock.now()) {
            core.handle(event, clock.now(), &mut effects);
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

/// Carry out effects in order. After a failed persist, nothing else of that job in this batch
/// happens except kills and timer bookkeeping (never continue as if saved).
fn carry_out<H: BatonHost>(
    core: &mut BatonCore,
    host: &mut H,
    wheel: &mut TimerWheel<Event>,
    tx: &Inbox,
    effects: &mut Vec<Effect>,
) {
    let mut failed_jobs: Vec<String> = Vec::new();
    for effect in effects.drain(..) {
        let blocked = effect
            .job_id()
            .is_some_and(|job| failed_jobs.iter().any(|f| f == job));
        match effect {
            Effect::Persist(change) => {
                if blocked {
                    continue;
                }
                if let Err(error) = host.persist(&change) {
                    tracing::error!(%error, "baton: persisting state failed");
                    let job = change.job_id().map(str::to_owned);
                    host.persistence_failed(job.as_deref(), &error);
                    if let Some(job) = job {
                        core.persistence_failed(&job);
                        failed_jobs.push(job);
                    }
                }
            }
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
                if !blocked {
                    host.job_finished(&job_id, outcome, reason.as_deref());
                }
            }
            Effect::Observer(event) => host.observe(&event),
        }
    }
}
