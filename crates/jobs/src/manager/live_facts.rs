//! What a sheet view needs of every sheet of a loaded job, packed beside its live checkpoint
//! (issue 24). `mozart status JOB` of a running 100,000-sheet job counts every sheet on the
//! baton task; walking the live checkpoint for it visits 100,000 boxed sheet states (~80 MB
//! scattered over the heap) while the job's sheet events wait. These facts are 24 bytes a
//! sheet in one array, kept up to date with each sheet transition the host persists, so a
//! view counts them in a fraction of a millisecond and touches the live checkpoint only for
//! the sheets it shows.

use mozart_ipc::checkpoint::SheetStatus;
use mozart_ipc::sheet_view::{SheetFacts, ViewBuilder};
use mozart_state::{CheckpointState, SheetState};

/// `flags` bits.
const FAILED_VALIDATION: u8 = 1;
const HAS_MOVEMENT: u8 = 2;
const HAS_VOICE: u8 = 4;
const HAS_DURATION: u8 = 8;
/// `instrument` of a sheet without one.
const NO_INSTRUMENT: u16 = u16::MAX;

/// One sheet's facts.
#[derive(Debug, Clone, Copy)]
struct Packed {
    num: u32,
    movement: u32,
    voice: u32,
    /// Index into [`LiveFacts::instruments`], or [`NO_INSTRUMENT`].
    instrument: u16,
    status: SheetStatus,
    flags: u8,
    duration: f64,
}

/// The facts of every sheet of one live checkpoint, in sheet order.
#[derive(Debug, Default)]
pub(crate) struct LiveFacts {
    sheets: Vec<Packed>,
    /// The instrument names seen, each once.
    instruments: Vec<String>,
}

impl LiveFacts {
    /// The facts of every sheet of `live` (one pass over its sheets).
    pub(crate) fn of(live: &CheckpointState) -> LiveFacts {
        let mut facts = LiveFacts {
            sheets: Vec::with_capacity(live.sheets.len()),
            instruments: Vec::new(),
        };
        // `scan`: compact sheets are made whole one at a time, and not kept.
        for (_, s) in live.sheets.scan() {
            let packed = facts.pack(&s);
            facts.sheets.push(packed);
        }
        facts
    }

    /// Whether these facts can stand for `live`'s sheets: one per sheet. (A sheet the host
    /// adds goes through [`LiveFacts::update`]; anything else that changed the number of
    /// sheets makes the caller count them again.)
    pub(crate) fn fits(&self, live: &CheckpointState) -> bool {
        self.sheets.len() == live.sheets.len()
    }

    /// Take `sheet`'s new state (after a transition the host persisted).
    pub(crate) fn update(&mut self, sheet: &SheetState) {
        let packed = self.pack(sheet);
        match self
            .sheets
            .binary_search_by_key(&sheet.sheet_num, |p| p.num)
        {
            Ok(i) => self.sheets[i] = packed,
            Err(i) => self.sheets.insert(i, packed),
        }
    }

    /// Feed every sheet to `builder`, in sheet order.
    pub(crate) fn add_to(&self, builder: &mut ViewBuilder) {
        for p in &self.sheets {
            let has = |bit: u8| p.flags & bit != 0;
            builder.add(&SheetFacts {
                num: p.num,
                status: p.status,
                failed_validation: has(FAILED_VALIDATION),
                movement: has(HAS_MOVEMENT).then_some(p.movement),
                voice: has(HAS_VOICE).then_some(p.voice),
                duration: has(HAS_DURATION).then_some(p.duration),
                instrument: self
                    .instruments
                    .get(usize::from(p.instrument))
                    .map(String::as_str),
            });
        }
    }

    fn pack(&mut self, s: &SheetState) -> Packed {
        let facts = crate::wire::sheet_facts(s);
        let mut flags = 0;
        if facts.failed_validation {
            flags |= FAILED_VALIDATION;
        }
        if facts.movement.is_some() {
            flags |= HAS_MOVEMENT;
        }
        if facts.voice.is_some() {
            flags |= HAS_VOICE;
        }
        if facts.duration.is_some() {
            flags |= HAS_DURATION;
        }
        Packed {
            num: facts.num,
            movement: facts.movement.unwrap_or(0),
            voice: facts.voice.unwrap_or(0),
            instrument: facts
                .instrument
                .map_or(NO_INSTRUMENT, |name| self.instrument_index(name)),
            status: facts.status,
            flags,
            duration: facts.duration.unwrap_or(0.0),
        }
    }

    /// The index of `name` in `instruments`, added when new. A job uses a handful of
    /// instruments; past 65,534 distinct names the sheet is shown without one.
    fn instrument_index(&mut self, name: &str) -> u16 {
        if let Some(i) = self.instruments.iter().position(|n| n == name) {
            return u16::try_from(i).unwrap_or(NO_INSTRUMENT);
        }
        match u16::try_from(self.instruments.len()) {
            Ok(i) if i < NO_INSTRUMENT => {
                self.instruments.push(name.to_owned());
                i
            }
            _ => NO_INSTRUMENT,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mozart_ipc::sheet_view::SheetQuery;

    fn sheet(num: u32, status: SheetStatus) -> SheetState {
        let mut s = SheetState::new(num);
        s.status = status;
        s.movement = Some(1 + num / 50);
        s.voice = Some(num % 50);
        if status == SheetStatus::Completed {
            s.execution_duration_seconds = Some(f64::from(num) / 10.0);
            s.validation_passed = Some(!num.is_multiple_of(7));
        }
        s.instrument_name = Some(if num.is_multiple_of(3) { "a" } else { "b" }.into());
        s
    }

    fn status_of(n: u32) -> SheetStatus {
        match n % 5 {
            0 => SheetStatus::Failed,
            1 => SheetStatus::InProgress,
            2 => SheetStatus::Pending,
            _ => SheetStatus::Completed,
        }
    }

    /// The view from the packed facts equals the view from the checkpoint, before and after
    /// transitions.
    #[test]
    fn the_packed_view_is_the_checkpoints_view() {
        let mut cp = CheckpointState::new("j", "j", 300);
        for n in 1..=300 {
            cp.sheets.insert(n, sheet(n, status_of(n)));
        }
        let mut facts = LiveFacts::of(&cp);
        for n in [3, 17, 150, 299] {
            let s = cp.sheets.get_mut(&n).unwrap();
            s.status = SheetStatus::Completed;
            s.execution_duration_seconds = Some(0.5);
            s.validation_passed = Some(false);
            s.instrument_name = Some("c".into());
            facts.update(s);
        }
        assert!(facts.fits(&cp));
        for query in [
            SheetQuery::summary(50),
            SheetQuery {
                mode: mozart_ipc::sheet_view::SheetMode::Page,
                states: Some(vec!["failed".into()]),
                offset: 10,
                limit: Some(25),
                ..SheetQuery::default()
            },
        ] {
            let mut want = ViewBuilder::new(query.clone(), cp.total_sheets);
            for s in cp.sheets.values() {
                want.add(&crate::wire::sheet_facts(s));
            }
            let mut got = ViewBuilder::new(query, cp.total_sheets);
            facts.add_to(&mut got);
            assert_eq!(got.chosen(), want.chosen());
            assert_eq!(got.finish(), want.finish());
        }
    }
}
