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
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Index, RangeBounds};
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

/// How one sheet is held.
#[derive(Debug)]
enum Slot {
    Whole(Box<SheetCheckpoint>),
    Compact(Box<CompactSheet>),
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
        }
    }
}

impl Slot {
    /// The sheet whole, made now (not kept) when it is compact and nobody read it yet.
    fn peek(&self, num: u32) -> Cow<'_, SheetCheckpoint> {
        match self {
            Slot::Whole(sheet) => Cow::Borrowed(sheet),
            Slot::Compact(c) => match c.copy.get() {
                Some(copy) => Cow::Borrowed(copy),
                None => Cow::Owned(c.facts.sheet(num)),
            },
        }
    }

    fn status(&self) -> SheetStatus {
        match self {
            Slot::Whole(sheet) => sheet.status,
            Slot::Compact(c) => c.facts.status(),
        }
    }

    /// The sheet, owned.
    fn into_sheet(self, num: u32) -> SheetCheckpoint {
        match self {
            Slot::Whole(sheet) => *sheet,
            Slot::Compact(mut c) => match c.copy.take() {
                Some(copy) => *copy,
                None => c.facts.sheet(num),
            },
        }
    }

    /// The sheet to change: a compact one is made whole for good.
    fn make_whole(&mut self, num: u32) -> &mut SheetCheckpoint {
        if let Slot::Compact(c) = self {
            let sheet = c
                .copy
                .take()
                .unwrap_or_else(|| Box::new(c.facts.sheet(num)));
            *self = Slot::Whole(sheet);
        }
        match self {
            Slot::Whole(sheet) => sheet,
            Slot::Compact(_) => unreachable!("a compact sheet was made whole just above"),
        }
    }

    /// Held as its facts when they are all it holds.
    fn compacted(self, num: u32, names: &mut Vec<Arc<str>>) -> Slot {
        match self {
            Slot::Whole(sheet) => match Facts::of(&sheet, names) {
                Some(facts) => {
                    debug_assert_eq!(sheet.sheet_num, num);
                    Slot::Compact(Box::new(CompactSheet {
                        facts: Known::of(facts),
                        copy: OnceLock::new(),
                    }))
                }
                None => Slot::Whole(sheet),
            },
            compact => compact,
        }
    }
}

/// Sheets by number, in number order.
#[derive(Default)]
pub struct SheetMap {
    slots: BTreeMap<u32, Slot>,
    /// Instrument names shared by compact sheets.
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

    /// A slot as `&SheetCheckpoint`: a compact sheet's whole copy, made once.
    fn read<'a>(&'a self, num: u32, slot: &'a Slot) -> &'a SheetCheckpoint {
        match slot {
            Slot::Whole(sheet) => sheet,
            Slot::Compact(c) => c.copy.get_or_init(|| {
                self.copied
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(num);
                Box::new(c.facts.sheet(num))
            }),
        }
    }

    /// Sheet `num` (a compact one's whole copy is kept until [`SheetMap::release_copies`];
    /// [`SheetMap::peek`] keeps nothing).
    pub fn get(&self, num: &u32) -> Option<&SheetCheckpoint> {
        self.slots.get(num).map(|slot| self.read(*num, slot))
    }

    /// Sheet `num` without keeping a copy of a compact one.
    pub fn peek(&self, num: &u32) -> Option<Cow<'_, SheetCheckpoint>> {
        self.slots.get(num).map(|slot| slot.peek(*num))
    }

    /// Sheet `num`'s status (nothing made whole).
    pub fn status_of(&self, num: &u32) -> Option<SheetStatus> {
        self.slots.get(num).map(Slot::status)
    }

    /// Sheet `num`, to change (a compact one is held whole from now on).
    pub fn get_mut(&mut self, num: &u32) -> Option<&mut SheetCheckpoint> {
        self.slots.get_mut(num).map(|slot| slot.make_whole(*num))
    }

    /// Whether sheet `num` is in the map.
    pub fn contains_key(&self, num: &u32) -> bool {
        self.slots.contains_key(num)
    }

    /// Put `sheet` in as sheet `num`, whole; the one it replaces.
    pub fn insert(&mut self, num: u32, sheet: SheetCheckpoint) -> Option<SheetCheckpoint> {
        self.slots
            .insert(num, Slot::Whole(Box::new(sheet)))
            .map(|old| old.into_sheet(num))
    }

    /// Take sheet `num` out.
    pub fn remove(&mut self, num: &u32) -> Option<SheetCheckpoint> {
        self.slots.remove(num).map(|slot| slot.into_sheet(*num))
    }

    /// Put `sheet` in as sheet `num`, held as its facts when they are all it holds.
    pub fn insert_compact(&mut self, num: u32, sheet: SheetCheckpoint) {
        let slot = Slot::Whole(Box::new(sheet)).compacted(num, &mut self.names);
        self.slots.insert(num, slot);
    }

    /// Hold sheet `num` as its facts if they are all it holds (after a change the owner
    /// saved); whether it is compact now.
    pub fn compact(&mut self, num: u32) -> bool {
        let Some(slot) = self.slots.remove(&num) else {
            return false;
        };
        let slot = slot.compacted(num, &mut self.names);
        let compact = matches!(slot, Slot::Compact(_));
        self.slots.insert(num, slot);
        compact
    }

    /// [`SheetMap::compact`] for every sheet.
    pub fn compact_all(&mut self) {
        let names = &mut self.names;
        // Rebuilt from the sorted slots (a bulk build, no lookups).
        self.slots = std::mem::take(&mut self.slots)
            .into_iter()
            .map(|(num, slot)| (num, slot.compacted(num, names)))
            .collect();
    }

    /// How many sheets are held compact.
    pub fn compact_len(&self) -> usize {
        self.slots
            .values()
            .filter(|slot| matches!(slot, Slot::Compact(_)))
            .count()
    }

    /// Drop the whole copies readers made of compact sheets (the sheets stay).
    pub fn release_copies(&mut self) {
        let copied = std::mem::take(
            self.copied
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for num in copied {
            if let Some(Slot::Compact(c)) = self.slots.get_mut(&num) {
                c.copy.take();
            }
        }
    }

    /// Apply the load-time fix-ups ([`SheetCheckpoint::normalize`]) to every sheet held
    /// whole: a compact one is made compact only when it is in normal form.
    pub fn normalize_whole(&mut self) {
        for slot in self.slots.values_mut() {
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
        self.slots
            .entry(num)
            .or_insert_with(|| Slot::Whole(Box::new(make())))
            .make_whole(num)
    }

    /// Sheet numbers, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &u32> + ExactSizeIterator + Clone {
        self.slots.keys()
    }

    /// Sheets, in number order (compact ones' copies kept: see [`SheetMap::scan`]).
    pub fn values(
        &self,
    ) -> impl DoubleEndedIterator<Item = &SheetCheckpoint> + ExactSizeIterator + Clone {
        self.slots.iter().map(move |(n, slot)| self.read(*n, slot))
    }

    /// Sheets, in number order, to change (every one held whole from now on).
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut SheetCheckpoint> {
        self.slots.iter_mut().map(|(n, slot)| slot.make_whole(*n))
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
        self.slots.iter().map(|(n, slot)| (*n, slot.peek(*n)))
    }

    /// (number, status) in number order (nothing made whole).
    pub fn statuses(
        &self,
    ) -> impl DoubleEndedIterator<Item = (u32, SheetStatus)> + ExactSizeIterator + Clone + '_ {
        self.slots.iter().map(|(n, slot)| (*n, slot.status()))
    }

    /// (number, sheet), in number order, to change (every one held whole from now on).
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&u32, &mut SheetCheckpoint)> {
        self.slots
            .iter_mut()
            .map(|(n, slot)| (n, slot.make_whole(*n)))
    }

    /// (number, sheet) for the numbers in `range`.
    pub fn range<R: RangeBounds<u32>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SheetCheckpoint)> {
        self.slots
            .range(range)
            .map(move |(n, slot)| (n, self.read(*n, slot)))
    }

    /// Keep only the sheets `keep` says yes to (every one held whole from now on).
    pub fn retain(&mut self, mut keep: impl FnMut(&u32, &mut SheetCheckpoint) -> bool) {
        self.slots.retain(|n, slot| keep(n, slot.make_whole(*n)));
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
        Box::new(
            self.slots
                .into_iter()
                .map(|(n, slot)| (n, slot.into_sheet(n))),
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
        self.slots
            .extend(iter.into_iter().map(|(n, s)| (n, Slot::Whole(Box::new(s)))));
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
        // A planned sheet is its plan only (its facts are ~190 bytes more).
        assert!(compact <= 64, "a planned sheet is {compact} bytes");
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
        assert!(map.slots.values().all(|slot| match slot {
            Slot::Compact(c) => c.copy.get().is_none() && matches!(c.facts, Known::Plan(_)),
            Slot::Whole(_) => false,
        }));
        // A completed sheet keeps all its facts, and reads back the same.
        let done = completed(2);
        map.insert_compact(2, done.clone());
        assert!(matches!(
            map.slots.get(&2),
            Some(Slot::Compact(c)) if matches!(c.facts, Known::Facts(_))
        ));
        assert_eq!(*map.peek(&2).unwrap(), done);
        assert_eq!(*map.peek(&3).unwrap(), planned(3));
    }
}
