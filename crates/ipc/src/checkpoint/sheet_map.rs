//! [`SheetMap`]: a checkpoint's sheets by number; most of a large job's sheets in a compact
//! form.
//!
//! A sheet's whole state ([`SheetCheckpoint`]) is ~1.1 KB, and the conductor holds one for
//! every sheet of every loaded job. Most of them say next to nothing: a sheet that has not
//! started carries its number, movement, voice and instrument; a completed sheet of a large
//! job, once its row is saved, its times, counts and verdict. Such a sheet can be held as
//! its facts alone ([`SheetMap::insert_compact`], [`SheetMap::compact`]): ~0.2 KB, exactly
//! the same state (a sheet is made compact only when its facts give back an equal sheet).
//! So a 100,000-sheet job costs memory for the sheets that are running or hold details, not
//! for every sheet planned (issue 24).
//!
//! Readers see no difference: [`SheetMap::get`] and the iterators hand out
//! `&SheetCheckpoint`. A compact sheet read that way is made whole once and the copy kept
//! (the reference must live as long as the map borrow) until [`SheetMap::release_copies`].
//! Passes over every sheet of a large job use [`SheetMap::scan`], [`SheetMap::peek`] or
//! [`SheetMap::statuses`], which keep nothing. Changing a sheet ([`SheetMap::get_mut`])
//! makes it whole for good, until the owner compacts it again.
//!
//! The JSON is the `BTreeMap<u32, SheetCheckpoint>` it replaces, whatever form each sheet
//! is held in; a map read from JSON holds every sheet whole.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::{Bound, Index, RangeBounds};
use std::sync::{Arc, Mutex, OnceLock};

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::checkpoint::{ExecutionMode, ExitReason, OutcomeCategory, SheetCheckpoint, SheetStatus};
use crate::time::Timestamp;

/// Instrument names kept once per map beyond which a name is no longer shared (a score
/// names a handful; this bounds the lookup).
const MAX_SHARED_NAMES: usize = 64;

/// The facts a compact sheet keeps; every other field of its [`SheetCheckpoint`] is at
/// its default ([`SheetCheckpoint::new`]).
#[derive(Clone, Debug, PartialEq)]
struct Facts {
    status: SheetStatus,
    success_without_retry: bool,
    validation_passed: Option<bool>,
    exit_reason: Option<ExitReason>,
    execution_mode: Option<ExecutionMode>,
    outcome_category: Option<OutcomeCategory>,
    attempt_count: u32,
    completion_attempts: u32,
    healing_attempts: u32,
    movement: Option<u32>,
    voice: Option<u32>,
    exit_code: Option<i32>,
    /// Microseconds since the epoch (the text is ours: `Timestamp::from_micros` gives it
    /// back, checked when the sheet is made compact).
    started_at: Option<i64>,
    completed_at: Option<i64>,
    execution_duration_seconds: Option<f64>,
    last_pass_percentage: Option<f64>,
    cost_confidence: f64,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    estimated_cost: Option<f64>,
    /// Shared by the map's sheets that play the same instrument.
    instrument_name: Option<Arc<str>>,
}

impl Facts {
    /// `sheet`'s facts, when they are all it holds and it is already in its load-time
    /// normal form (so that normalising a loaded map may skip compact sheets).
    fn of(sheet: &SheetCheckpoint, names: &mut Vec<Arc<str>>) -> Option<Facts> {
        let micros = |t: &Option<Timestamp>| match t {
            None => Some(None),
            Some(t) => t.to_micros().map(Some),
        };
        let facts = Facts {
            status: sheet.status,
            success_without_retry: sheet.success_without_retry,
            validation_passed: sheet.validation_passed,
            exit_reason: sheet.exit_reason,
            execution_mode: sheet.execution_mode,
            outcome_category: sheet.outcome_category,
            attempt_count: sheet.attempt_count,
            completion_attempts: sheet.completion_attempts,
            healing_attempts: sheet.healing_attempts,
            movement: sheet.movement,
            voice: sheet.voice,
            exit_code: sheet.exit_code,
            started_at: micros(&sheet.started_at)?,
            completed_at: micros(&sheet.completed_at)?,
            execution_duration_seconds: sheet.execution_duration_seconds,
            last_pass_percentage: sheet.last_pass_percentage,
            cost_confidence: sheet.cost_confidence,
            input_tokens: sheet.input_tokens,
            output_tokens: sheet.output_tokens,
            estimated_cost: sheet.estimated_cost,
            instrument_name: sheet.instrument_name.as_deref().map(|n| shared(names, n)),
        };
        // Lossless or not at all: any other field set, or a time in another text shape,
        // and the sheet stays whole.
        let back = facts.sheet(sheet.sheet_num);
        if back != *sheet {
            return None;
        }
        let mut normal = back.clone();
        normal.normalize();
        (normal == back).then_some(facts)
    }

    /// The whole sheet `num` these facts stand for.
    fn sheet(&self, num: u32) -> SheetCheckpoint {
        let mut s = SheetCheckpoint::new(num);
        s.status = self.status;
        s.success_without_retry = self.success_without_retry;
        s.validation_passed = self.validation_passed;
        s.exit_reason = self.exit_reason;
        s.execution_mode = self.execution_mode;
        s.outcome_category = self.outcome_category;
        s.attempt_count = self.attempt_count;
        s.completion_attempts = self.completion_attempts;
        s.healing_attempts = self.healing_attempts;
        s.movement = self.movement;
        s.voice = self.voice;
        s.exit_code = self.exit_code;
        s.started_at = self.started_at.map(Timestamp::from_micros);
        s.completed_at = self.completed_at.map(Timestamp::from_micros);
        s.execution_duration_seconds = self.execution_duration_seconds;
        s.last_pass_percentage = self.last_pass_percentage;
        s.cost_confidence = self.cost_confidence;
        s.input_tokens = self.input_tokens;
        s.output_tokens = self.output_tokens;
        s.estimated_cost = self.estimated_cost;
        s.instrument_name = self.instrument_name.as_deref().map(str::to_owned);
        s
    }
}

/// The facts of a sheet that is only its plan — number, status, movement, voice and
/// instrument, every other fact at its default — which is what every planned sheet of a
/// job is: 40 bytes, where [`Facts`] are ~190 (issue 24).
#[derive(Clone, Debug, PartialEq)]
struct Planned {
    status: SheetStatus,
    movement: Option<u32>,
    voice: Option<u32>,
    instrument_name: Option<Arc<str>>,
}

impl Planned {
    /// `facts` as a plan, when that is all they hold.
    fn of(facts: &Facts) -> Option<Planned> {
        let planned = Planned {
            status: facts.status,
            movement: facts.movement,
            voice: facts.voice,
            instrument_name: facts.instrument_name.clone(),
        };
        (planned.facts() == *facts).then_some(planned)
    }

    /// The whole facts: the plan, every other fact as a new sheet has it.
    fn facts(&self) -> Facts {
        let new = SheetCheckpoint::new(0);
        let micros = |t: &Option<Timestamp>| t.as_ref().and_then(Timestamp::to_micros);
        Facts {
            status: self.status,
            success_without_retry: new.success_without_retry,
            validation_passed: new.validation_passed,
            exit_reason: new.exit_reason,
            execution_mode: new.execution_mode,
            outcome_category: new.outcome_category,
            attempt_count: new.attempt_count,
            completion_attempts: new.completion_attempts,
            healing_attempts: new.healing_attempts,
            movement: self.movement,
            voice: self.voice,
            exit_code: new.exit_code,
            started_at: micros(&new.started_at),
            completed_at: micros(&new.completed_at),
            execution_duration_seconds: new.execution_duration_seconds,
            last_pass_percentage: new.last_pass_percentage,
            cost_confidence: new.cost_confidence,
            input_tokens: new.input_tokens,
            output_tokens: new.output_tokens,
            estimated_cost: new.estimated_cost,
            instrument_name: self.instrument_name.clone(),
        }
    }
}

/// What a compact sheet keeps: its plan alone (a sheet not started), or all its facts.
#[derive(Clone, Debug, PartialEq)]
enum Known {
    Plan(Planned),
    /// Boxed: most compact sheets of a job being planned ones, the rest pay the pointer.
    Facts(Box<Facts>),
}

impl Known {
    fn of(facts: Facts) -> Known {
        match Planned::of(&facts) {
            Some(planned) => Known::Plan(planned),
            None => Known::Facts(Box::new(facts)),
        }
    }

    fn status(&self) -> SheetStatus {
        match self {
            Known::Plan(p) => p.status,
            Known::Facts(f) => f.status,
        }
    }

    /// The whole sheet `num` these facts stand for.
    fn sheet(&self, num: u32) -> SheetCheckpoint {
        match self {
            Known::Plan(p) => p.facts().sheet(num),
            Known::Facts(f) => f.sheet(num),
        }
    }
}

/// `name`, shared with the map's other sheets that name it.
fn shared(names: &mut Vec<Arc<str>>, name: &str) -> Arc<str> {
    if let Some(known) = names.iter().find(|n| &***n == name) {
        return Arc::clone(known);
    }
    let new: Arc<str> = Arc::from(name);
    if names.len() < MAX_SHARED_NAMES {
        names.push(Arc::clone(&new));
    }
    new
}

/// A compact sheet: its facts, and the whole copy a reader asked for (if one did).
#[derive(Debug)]
struct CompactSheet {
    facts: Known,
    copy: OnceLock<Box<SheetCheckpoint>>,
}

/// A planned sheet packed in place: no allocation, its instrument an index into the map's
/// shared names (issue 24: 40 bytes a planned sheet with its number, where a boxed compact
/// sheet and its B-tree slot cost ~100).
#[derive(Clone, Copy, Debug, PartialEq)]
struct PackedPlan {
    movement: u32,
    voice: u32,
    status: SheetStatus,
    /// 0: no instrument; `i + 1`: the map's shared name `i`.
    name: u8,
    has_movement: bool,
    has_voice: bool,
}

impl PackedPlan {
    /// `plan` packed, when its instrument is one of the map's shared names.
    fn of(plan: &Planned, names: &[Arc<str>]) -> Option<PackedPlan> {
        let name = match &plan.instrument_name {
            None => 0,
            Some(name) => {
                let i = names.iter().position(|n| Arc::ptr_eq(n, name))?;
                u8::try_from(i + 1).ok()?
            }
        };
        Some(PackedPlan {
            movement: plan.movement.unwrap_or(0),
            voice: plan.voice.unwrap_or(0),
            status: plan.status,
            name,
            has_movement: plan.movement.is_some(),
            has_voice: plan.voice.is_some(),
        })
    }

    fn plan(&self, names: &[Arc<str>]) -> Planned {
        Planned {
            status: self.status,
            movement: self.has_movement.then_some(self.movement),
            voice: self.has_voice.then_some(self.voice),
            instrument_name: usize::from(self.name)
                .checked_sub(1)
                .and_then(|i| names.get(i))
                .map(Arc::clone),
        }
    }

    fn sheet(&self, num: u32, names: &[Arc<str>]) -> SheetCheckpoint {
        self.plan(names).facts().sheet(num)
    }
}

/// How one sheet is held.
#[derive(Debug)]
enum Slot {
    Whole(Box<SheetCheckpoint>),
    Compact(Box<CompactSheet>),
    /// A planned sheet, and the whole copy a reader asked for (if one did).
    Plan(PackedPlan, OnceLock<Box<SheetCheckpoint>>),
}

impl Clone for Slot {
    fn clone(&self) -> Slot {
        match self {
            Slot::Whole(sheet) => Slot::Whole(sheet.clone()),
            // The copy is a cache: a clone starts without it.
            Slot::Compact(c) => Slot::Compact(Box::new(CompactSheet {
                facts: c.facts.clone(),
                copy: OnceLock::new(),
            })),
            Slot::Plan(plan, _) => Slot::Plan(*plan, OnceLock::new()),
        }
    }
}

impl Slot {
    /// The sheet whole, made now (not kept) when it is compact and nobody read it yet.
    fn peek(&self, num: u32, names: &[Arc<str>]) -> Cow<'_, SheetCheckpoint> {
        match self {
            Slot::Whole(sheet) => Cow::Borrowed(sheet),
            Slot::Compact(c) => match c.copy.get() {
                Some(copy) => Cow::Borrowed(copy),
                None => Cow::Owned(c.facts.sheet(num)),
            },
            Slot::Plan(plan, copy) => match copy.get() {
                Some(copy) => Cow::Borrowed(copy),
                None => Cow::Owned(plan.sheet(num, names)),
            },
        }
    }

    fn status(&self) -> SheetStatus {
        match self {
            Slot::Whole(sheet) => sheet.status,
            Slot::Compact(c) => c.facts.status(),
            Slot::Plan(plan, _) => plan.status,
        }
    }

    /// The sheet, owned.
    fn into_sheet(self, num: u32, names: &[Arc<str>]) -> SheetCheckpoint {
        match self {
            Slot::Whole(sheet) => *sheet,
            Slot::Compact(mut c) => match c.copy.take() {
                Some(copy) => *copy,
                None => c.facts.sheet(num),
            },
            Slot::Plan(plan, mut copy) => match copy.take() {
                Some(copy) => *copy,
                None => plan.sheet(num, names),
            },
        }
    }

    /// The sheet to change: a compact one is made whole for good.
    fn make_whole(&mut self, num: u32, names: &[Arc<str>]) -> &mut SheetCheckpoint {
        let whole = match self {
            Slot::Whole(_) => None,
            Slot::Compact(c) => Some(
                c.copy
                    .take()
                    .unwrap_or_else(|| Box::new(c.facts.sheet(num))),
            ),
            Slot::Plan(plan, copy) => Some(
                copy.take()
                    .unwrap_or_else(|| Box::new(plan.sheet(num, names))),
            ),
        };
        if let Some(sheet) = whole {
            *self = Slot::Whole(sheet);
        }
        match self {
            Slot::Whole(sheet) => sheet,
            Slot::Compact(_) | Slot::Plan(..) => {
                unreachable!("a compact sheet was made whole just above")
            }
        }
    }

    /// The whole copy a reader made of a compact sheet, dropped.
    fn drop_copy(&mut self) {
        match self {
            Slot::Whole(_) => {}
            Slot::Compact(c) => {
                c.copy.take();
            }
            Slot::Plan(_, copy) => {
                copy.take();
            }
        }
    }

    fn is_compact(&self) -> bool {
        !matches!(self, Slot::Whole(_))
    }

    /// Held as its facts when they are all it holds.
    fn compact(&mut self, num: u32, names: &mut Vec<Arc<str>>) {
        let Slot::Whole(sheet) = self else { return };
        let Some(facts) = Facts::of(sheet, names) else {
            return;
        };
        debug_assert_eq!(sheet.sheet_num, num);
        let known = Known::of(facts);
        *self = match &known {
            Known::Plan(plan) => match PackedPlan::of(plan, names) {
                Some(packed) => Slot::Plan(packed, OnceLock::new()),
                None => Slot::Compact(Box::new(CompactSheet {
                    facts: known,
                    copy: OnceLock::new(),
                })),
            },
            Known::Facts(_) => Slot::Compact(Box::new(CompactSheet {
                facts: known,
                copy: OnceLock::new(),
            })),
        };
    }
}

/// Sheets by number, in number order.
#[derive(Default)]
pub struct SheetMap {
    /// Sorted by number; sheet `n` at `n - 1` when the numbers are 1, 2, 3… (every planned
    /// job): found by arithmetic, else by a binary search. A ring buffer, not a B-tree:
    /// ~40 bytes of a node a sheet less (issue 24), and taking the sheets out in order
    /// from the front (a resume carrying the previous run's sheets over) costs nothing.
    slots: VecDeque<(u32, Slot)>,
    /// Instrument names shared by compact sheets (only ever added to: packed plans index it).
    names: Vec<Arc<str>>,
    /// Compact sheets a reader made a whole copy of ([`SheetMap::release_copies`]).
    copied: Mutex<Vec<u32>>,
}

impl Clone for SheetMap {
    fn clone(&self) -> SheetMap {
        SheetMap {
            slots: self.slots.clone(),
            names: self.names.clone(),
            copied: Mutex::new(Vec::new()),
        }
    }
}

impl PartialEq for SheetMap {
    fn eq(&self, other: &SheetMap) -> bool {
        self.len() == other.len() && self.scan().eq(other.scan())
    }
}

impl fmt::Debug for SheetMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.scan()).finish()
    }
}

impl SheetMap {
    /// An empty map.
    pub fn new() -> SheetMap {
        SheetMap::default()
    }

    /// Number of sheets.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No sheets.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Where sheet `num` is (`Ok`), or would go (`Err`).
    fn position(&self, num: u32) -> Result<usize, usize> {
        let at = (num as usize).wrapping_sub(1);
        if self.slots.get(at).is_some_and(|(n, _)| *n == num) {
            return Ok(at);
        }
        self.slots.binary_search_by_key(&num, |(n, _)| *n)
    }

    fn slot(&self, num: u32) -> Option<&Slot> {
        self.position(num).ok().map(|i| &self.slots[i].1)
    }

    /// Put `slot` in as sheet `num`; the slot it replaces.
    fn put(&mut self, num: u32, slot: Slot) -> Option<Slot> {
        match self.position(num) {
            Ok(i) => Some(std::mem::replace(&mut self.slots[i].1, slot)),
            Err(i) => {
                self.slots.insert(i, (num, slot));
                None
            }
        }
    }

    /// A slot as `&SheetCheckpoint`: a compact sheet's whole copy, made once.
    fn read<'a>(&'a self, num: u32, slot: &'a Slot) -> &'a SheetCheckpoint {
        let note = || {
            self.copied
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(num);
        };
        match slot {
            Slot::Whole(sheet) => sheet,
            Slot::Compact(c) => c.copy.get_or_init(|| {
                note();
                Box::new(c.facts.sheet(num))
            }),
            Slot::Plan(plan, copy) => copy.get_or_init(|| {
                note();
                Box::new(plan.sheet(num, &self.names))
            }),
        }
    }

    /// Sheet `num` (a compact one's whole copy is kept until [`SheetMap::release_copies`];
    /// [`SheetMap::peek`] keeps nothing).
    pub fn get(&self, num: &u32) -> Option<&SheetCheckpoint> {
        self.slot(*num).map(|slot| self.read(*num, slot))
    }

    /// Sheet `num` without keeping a copy of a compact one.
    pub fn peek(&self, num: &u32) -> Option<Cow<'_, SheetCheckpoint>> {
        self.slot(*num).map(|slot| slot.peek(*num, &self.names))
    }

    /// Sheet `num`'s status (nothing made whole).
    pub fn status_of(&self, num: &u32) -> Option<SheetStatus> {
        self.slot(*num).map(Slot::status)
    }

    /// Sheet `num`, to change (a compact one is held whole from now on).
    pub fn get_mut(&mut self, num: &u32) -> Option<&mut SheetCheckpoint> {
        let i = self.position(*num).ok()?;
        Some(self.slots[i].1.make_whole(*num, &self.names))
    }

    /// Whether sheet `num` is in the map.
    pub fn contains_key(&self, num: &u32) -> bool {
        self.position(*num).is_ok()
    }

    /// Put `sheet` in as sheet `num`, whole; the one it replaces.
    pub fn insert(&mut self, num: u32, sheet: SheetCheckpoint) -> Option<SheetCheckpoint> {
        self.put(num, Slot::Whole(Box::new(sheet)))
            .map(|old| old.into_sheet(num, &self.names))
    }

    /// Take sheet `num` out.
    pub fn remove(&mut self, num: &u32) -> Option<SheetCheckpoint> {
        let i = self.position(*num).ok()?;
        let (n, slot) = self.slots.remove(i)?;
        Some(slot.into_sheet(n, &self.names))
    }

    /// Put `sheet` in as sheet `num`, held as its facts when they are all it holds.
    pub fn insert_compact(&mut self, num: u32, sheet: SheetCheckpoint) {
        let mut slot = Slot::Whole(Box::new(sheet));
        slot.compact(num, &mut self.names);
        self.put(num, slot);
    }

    /// Hold sheet `num` as its facts if they are all it holds (after a change the owner
    /// saved); whether it is compact now.
    pub fn compact(&mut self, num: u32) -> bool {
        let Ok(i) = self.position(num) else {
            return false;
        };
        let slot = &mut self.slots[i].1;
        slot.compact(num, &mut self.names);
        slot.is_compact()
    }

    /// [`SheetMap::compact`] for every sheet.
    pub fn compact_all(&mut self) {
        let names = &mut self.names;
        for (num, slot) in &mut self.slots {
            slot.compact(*num, names);
        }
    }

    /// How many sheets are held compact.
    pub fn compact_len(&self) -> usize {
        self.slots.iter().filter(|(_, s)| s.is_compact()).count()
    }

    /// Drop the whole copies readers made of compact sheets (the sheets stay).
    pub fn release_copies(&mut self) {
        let copied = std::mem::take(
            self.copied
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for num in copied {
            if let Ok(i) = self.position(num) {
                self.slots[i].1.drop_copy();
            }
        }
    }

    /// Apply the load-time fix-ups ([`SheetCheckpoint::normalize`]) to every sheet held
    /// whole: a compact one is made compact only when it is in normal form.
    pub fn normalize_whole(&mut self) {
        for (_, slot) in &mut self.slots {
            if let Slot::Whole(sheet) = slot {
                sheet.normalize();
            }
        }
    }

    /// Sheet `num`, made by `make` first when it is not there (`entry().or_insert_with()`).
    pub fn get_or_insert_with(
        &mut self,
        num: u32,
        make: impl FnOnce() -> SheetCheckpoint,
    ) -> &mut SheetCheckpoint {
        let i = match self.position(num) {
            Ok(i) => i,
            Err(i) => {
                self.slots.insert(i, (num, Slot::Whole(Box::new(make()))));
                i
            }
        };
        self.slots[i].1.make_whole(num, &self.names)
    }

    /// Sheet numbers, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &u32> + ExactSizeIterator + Clone {
        self.slots.iter().map(|(n, _)| n)
    }

    /// Sheets, in number order (compact ones' copies kept: see [`SheetMap::scan`]).
    pub fn values(
        &self,
    ) -> impl DoubleEndedIterator<Item = &SheetCheckpoint> + ExactSizeIterator + Clone {
        self.slots.iter().map(move |(n, slot)| self.read(*n, slot))
    }

    /// Sheets, in number order, to change (every one held whole from now on).
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut SheetCheckpoint> {
        let names = &self.names;
        self.slots
            .iter_mut()
            .map(move |(n, slot)| slot.make_whole(*n, names))
    }

    /// (number, sheet), in number order (compact ones' copies kept: see
    /// [`SheetMap::scan`]).
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SheetCheckpoint)> + ExactSizeIterator + Clone {
        self.slots
            .iter()
            .map(move |(n, slot)| (n, self.read(*n, slot)))
    }

    /// (number, sheet) in number order, a compact sheet made whole for the pass only: the
    /// way to visit every sheet of a large job.
    pub fn scan(
        &self,
    ) -> impl DoubleEndedIterator<Item = (u32, Cow<'_, SheetCheckpoint>)> + ExactSizeIterator + Clone
    {
        let names = &self.names;
        self.slots
            .iter()
            .map(move |(n, slot)| (*n, slot.peek(*n, names)))
    }

    /// (number, status) in number order (nothing made whole).
    pub fn statuses(
        &self,
    ) -> impl DoubleEndedIterator<Item = (u32, SheetStatus)> + ExactSizeIterator + Clone + '_ {
        self.slots.iter().map(|(n, slot)| (*n, slot.status()))
    }

    /// (number, sheet), in number order, to change (every one held whole from now on).
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&u32, &mut SheetCheckpoint)> {
        let names = &self.names;
        self.slots
            .iter_mut()
            .map(move |(n, slot)| (&*n, slot.make_whole(*n, names)))
    }

    /// (number, sheet) for the numbers in `range`.
    pub fn range<R: RangeBounds<u32>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SheetCheckpoint)> {
        let start = self
            .slots
            .partition_point(|(n, _)| match range.start_bound() {
                Bound::Included(s) => n < s,
                Bound::Excluded(s) => n <= s,
                Bound::Unbounded => false,
            });
        let end = self
            .slots
            .partition_point(|(n, _)| match range.end_bound() {
                Bound::Included(e) => n <= e,
                Bound::Excluded(e) => n < e,
                Bound::Unbounded => true,
            });
        self.slots
            .range(start..end.max(start))
            .map(move |(n, slot)| (n, self.read(*n, slot)))
    }

    /// Keep only the sheets `keep` says yes to (every one held whole from now on).
    pub fn retain(&mut self, mut keep: impl FnMut(&u32, &mut SheetCheckpoint) -> bool) {
        let names = &self.names;
        self.slots
            .retain_mut(|(n, slot)| keep(n, slot.make_whole(*n, names)));
    }
}

impl Index<&u32> for SheetMap {
    type Output = SheetCheckpoint;

    /// Panics when sheet `num` is not in the map, as `BTreeMap`'s index does.
    fn index(&self, num: &u32) -> &SheetCheckpoint {
        match self.get(num) {
            Some(sheet) => sheet,
            None => panic!("sheet {num} is not in the map"),
        }
    }
}

impl<'a> IntoIterator for &'a SheetMap {
    type Item = (&'a u32, &'a SheetCheckpoint);
    type IntoIter = Box<dyn Iterator<Item = (&'a u32, &'a SheetCheckpoint)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl IntoIterator for SheetMap {
    type Item = (u32, SheetCheckpoint);
    type IntoIter = Box<dyn Iterator<Item = (u32, SheetCheckpoint)>>;

    fn into_iter(self) -> Self::IntoIter {
        let names = self.names;
        Box::new(
            self.slots
                .into_iter()
                .map(move |(n, slot)| (n, slot.into_sheet(n, &names))),
        )
    }
}

impl FromIterator<(u32, SheetCheckpoint)> for SheetMap {
    fn from_iter<I: IntoIterator<Item = (u32, SheetCheckpoint)>>(iter: I) -> SheetMap {
        let mut map = SheetMap::new();
        map.extend(iter);
        map
    }
}

impl Extend<(u32, SheetCheckpoint)> for SheetMap {
    fn extend<I: IntoIterator<Item = (u32, SheetCheckpoint)>>(&mut self, iter: I) {
        for (n, s) in iter {
            // In order (the usual case): appended; else put in its place.
            if self.slots.back().is_none_or(|(last, _)| *last < n) {
                self.slots.push_back((n, Slot::Whole(Box::new(s))));
            } else {
                self.put(n, Slot::Whole(Box::new(s)));
            }
        }
    }
}

impl<const N: usize> From<[(u32, SheetCheckpoint); N]> for SheetMap {
    fn from(sheets: [(u32, SheetCheckpoint); N]) -> SheetMap {
        sheets.into_iter().collect()
    }
}

impl Serialize for SheetMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The same document as the `BTreeMap<u32, SheetCheckpoint>` it replaces; compact
        // sheets are made whole one at a time, and not kept.
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (num, sheet) in self.scan() {
            map.serialize_entry(&num, &*sheet)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for SheetMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SheetMap, D::Error> {
        let sheets = BTreeMap::<u32, Box<SheetCheckpoint>>::deserialize(deserializer)?;
        Ok(SheetMap {
            slots: sheets
                .into_iter()
                .map(|(n, s)| (n, Slot::Whole(s)))
                .collect(),
            ..SheetMap::default()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_the_map_of_sheets_it_replaces() {
        let plain: BTreeMap<u32, SheetCheckpoint> =
            [(1, SheetCheckpoint::new(1)), (12, SheetCheckpoint::new(12))].into();
        let map: SheetMap = [(1, SheetCheckpoint::new(1)), (12, SheetCheckpoint::new(12))].into();
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(text, serde_json::to_string(&plain).unwrap());
        let back: SheetMap = serde_json::from_str(&text).unwrap();
        assert_eq!(back, map);
        assert_eq!(back.keys().copied().collect::<Vec<_>>(), vec![1, 12]);
    }

    /// A planned sheet as the conductor makes it at submission.
    fn planned(num: u32) -> SheetCheckpoint {
        let mut s = SheetCheckpoint::new(num);
        s.instrument_name = Some("claude-code".into());
        s.movement = Some(1);
        s.voice = Some(num);
        s
    }

    /// A completed sheet of a large job once its details left memory.
    fn completed(num: u32) -> SheetCheckpoint {
        let mut s = planned(num);
        s.status = SheetStatus::Completed;
        s.attempt_count = 1;
        s.started_at = Some(Timestamp::from_epoch(1_795_777_548.069_221));
        s.completed_at = Some(Timestamp::now());
        s.exit_code = Some(0);
        s.validation_passed = Some(true);
        s.execution_duration_seconds = Some(0.055_696_853);
        s.last_pass_percentage = Some(100.0);
        s.success_without_retry = true;
        s.cost_confidence = 0.0;
        s
    }

    #[test]
    fn compact_sheets_read_write_and_serialize_as_the_whole_ones() {
        let sheets = [planned(1), completed(2), planned(3)];
        let mut whole = SheetMap::new();
        let mut compact = SheetMap::new();
        for s in sheets {
            whole.insert(s.sheet_num, s.clone());
            compact.insert_compact(s.sheet_num, s);
        }
        assert_eq!(compact.compact_len(), 3);
        assert_eq!(compact, whole);
        assert_eq!(
            serde_json::to_string(&compact).unwrap(),
            serde_json::to_string(&whole).unwrap()
        );
        assert_eq!(compact.get(&2), whole.get(&2));
        assert_eq!(*compact.peek(&3).unwrap(), planned(3));
        assert_eq!(compact.status_of(&2), Some(SheetStatus::Completed));
        assert_eq!(
            compact.statuses().collect::<Vec<_>>(),
            vec![
                (1, SheetStatus::Pending),
                (2, SheetStatus::Completed),
                (3, SheetStatus::Pending)
            ]
        );
        // A change makes the sheet whole, and it can be made compact again.
        compact.get_mut(&1).unwrap().status = SheetStatus::InProgress;
        assert_eq!(compact.compact_len(), 2);
        assert_eq!(compact.get(&1).unwrap().status, SheetStatus::InProgress);
        compact.get_mut(&1).unwrap().stdout_tail = Some("hello".into());
        assert!(
            !compact.compact(1),
            "a sheet with an output tail is not only facts"
        );
        assert_eq!(
            compact.get(&1).unwrap().stdout_tail.as_deref(),
            Some("hello")
        );
        let sheet = compact.get_mut(&1).unwrap();
        sheet.stdout_tail = None;
        sheet.started_at = Some(Timestamp::now());
        assert!(compact.compact(1));
        assert_eq!(compact.get(&1).unwrap().status, SheetStatus::InProgress);
        let owned: Vec<_> = compact.clone().into_iter().map(|(_, s)| s.status).collect();
        assert_eq!(owned.len(), 3);
        compact.release_copies();
        assert_eq!(compact.get(&2), whole.get(&2));
    }

    #[test]
    fn a_sheet_that_is_more_than_its_facts_stays_whole() {
        let mut map = SheetMap::new();
        let mut failed = planned(1);
        failed.status = SheetStatus::Failed;
        failed.error_message = Some("exit 1".into());
        map.insert_compact(1, failed.clone());
        // Upstream's time text (no fraction) is kept as written.
        let mut upstream = completed(2);
        upstream.completed_at = Some(Timestamp::from_raw("2024-02-29T12:34:56Z"));
        map.insert_compact(2, upstream.clone());
        // Not in load-time normal form: normalising would change it.
        let mut unfinished = completed(3);
        unfinished.completed_at = None;
        map.insert_compact(3, unfinished.clone());
        assert_eq!(map.compact_len(), 0);
        assert_eq!(map.get(&1), Some(&failed));
        assert_eq!(map.get(&2), Some(&upstream));
        assert_eq!(map.get(&3), Some(&unfinished));
    }

    /// Issue 24: a planned sheet of a 100,000-sheet job must not cost a whole sheet state.
    #[test]
    fn a_planned_sheet_costs_a_fraction_of_a_whole_one() {
        let compact = std::mem::size_of::<CompactSheet>();
        let whole = std::mem::size_of::<SheetCheckpoint>();
        assert!(
            compact * 3 < whole,
            "a compact sheet is {compact} bytes, a whole one {whole}"
        );
        // A planned sheet is its plan, packed in its slot with its number: no allocation.
        let slot = std::mem::size_of::<(u32, Slot)>();
        assert!(slot <= 40, "a planned sheet's slot is {slot} bytes");
        let mut map = SheetMap::new();
        for n in 1..=1000 {
            map.insert_compact(n, planned(n));
        }
        assert_eq!(map.compact_len(), 1000);
        // Reading keeps a copy until released; scanning keeps none.
        assert_eq!(map.scan().count(), 1000);
        assert!(map.copied.lock().unwrap().is_empty());
        let _ = map.values().count();
        assert_eq!(map.copied.lock().unwrap().len(), 1000);
        map.release_copies();
        assert!(map.copied.lock().unwrap().is_empty());
        assert!(map.slots.iter().all(|(_, slot)| match slot {
            Slot::Plan(_, copy) => copy.get().is_none(),
            Slot::Compact(_) | Slot::Whole(_) => false,
        }));
        // A completed sheet keeps all its facts, and reads back the same.
        let done = completed(2);
        map.insert_compact(2, done.clone());
        assert!(matches!(
            map.slot(2),
            Some(Slot::Compact(c)) if matches!(c.facts, Known::Facts(_))
        ));
        assert_eq!(*map.peek(&2).unwrap(), done);
        assert_eq!(*map.peek(&3).unwrap(), planned(3));
        assert_eq!(map.get(&3), Some(&planned(3)));
    }

    #[test]
    fn sheets_out_of_order_or_sparse_are_found_and_kept_in_order() {
        let mut map = SheetMap::new();
        for n in [5, 2, 9, 7] {
            map.insert_compact(n, planned(n));
        }
        map.insert(3, completed(3));
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), vec![2, 3, 5, 7, 9]);
        assert_eq!(map.get(&7), Some(&planned(7)));
        assert!(map.get(&4).is_none() && map.get(&0).is_none() && map.get(&10).is_none());
        assert_eq!(
            map.range(3..=7).map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![3, 5, 7]
        );
        assert_eq!(
            map.range(6..).map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![7, 9]
        );
        assert_eq!(map.range(10..).count(), 0);
        assert_eq!(map.remove(&5), Some(planned(5)));
        map.get_or_insert_with(1, || planned(1)).status = SheetStatus::Completed;
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 7, 9]);
        assert_eq!(map.status_of(&1), Some(SheetStatus::Completed));
        map.retain(|n, _| n % 2 == 1);
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), vec![1, 3, 7, 9]);
        let text = serde_json::to_string(&map).unwrap();
        let back: SheetMap = serde_json::from_str(&text).unwrap();
        assert_eq!(back, map);
    }
}
