//! [`SheetMap`]: a checkpoint's sheets by number, each state in its own allocation.
//!
//! A sheet's state ([`SheetCheckpoint`]) is ~1.1 KB. Held inline in a `BTreeMap`, whose nodes are often only half
//! full, a sheet cost ~2.1 KB of the conductor's memory (measured: 20,000 pending sheets);
//! boxed, ~1.2 KB — 90 MB less for a 100,000-sheet job (issue 24). The API is the subset of
//! `BTreeMap`'s that the code uses, handing out `&SheetCheckpoint`, and the JSON is the same map. The conductor's
//! memory and the documents clients read hold sheets the same way (one model).

use std::collections::BTreeMap;
use std::ops::{Index, RangeBounds};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::checkpoint::SheetCheckpoint;

/// Sheets by number, in number order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SheetMap(BTreeMap<u32, Box<SheetCheckpoint>>);

impl SheetMap {
    /// An empty map.
    pub fn new() -> SheetMap {
        SheetMap(BTreeMap::new())
    }

    /// Number of sheets.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No sheets.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sheet `num`.
    pub fn get(&self, num: &u32) -> Option<&SheetCheckpoint> {
        self.0.get(num).map(|b| &**b)
    }

    /// Sheet `num`, to change.
    pub fn get_mut(&mut self, num: &u32) -> Option<&mut SheetCheckpoint> {
        self.0.get_mut(num).map(|b| &mut **b)
    }

    /// Whether sheet `num` is in the map.
    pub fn contains_key(&self, num: &u32) -> bool {
        self.0.contains_key(num)
    }

    /// Put `sheet` in as sheet `num`; the one it replaces.
    pub fn insert(&mut self, num: u32, sheet: SheetCheckpoint) -> Option<SheetCheckpoint> {
        self.0.insert(num, Box::new(sheet)).map(|b| *b)
    }

    /// Take sheet `num` out.
    pub fn remove(&mut self, num: &u32) -> Option<SheetCheckpoint> {
        self.0.remove(num).map(|b| *b)
    }

    /// Sheet `num`, made by `make` first when it is not there (`entry().or_insert_with()`).
    pub fn get_or_insert_with(
        &mut self,
        num: u32,
        make: impl FnOnce() -> SheetCheckpoint,
    ) -> &mut SheetCheckpoint {
        self.0.entry(num).or_insert_with(|| Box::new(make()))
    }

    /// Sheet numbers, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &u32> + ExactSizeIterator + Clone {
        self.0.keys()
    }

    /// Sheets, in number order.
    pub fn values(
        &self,
    ) -> impl DoubleEndedIterator<Item = &SheetCheckpoint> + ExactSizeIterator + Clone {
        self.0.values().map(|b| &**b)
    }

    /// Sheets, in number order, to change.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut SheetCheckpoint> {
        self.0.values_mut().map(|b| &mut **b)
    }

    /// (number, sheet), in number order.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SheetCheckpoint)> + ExactSizeIterator + Clone {
        self.0.iter().map(|(n, b)| (n, &**b))
    }

    /// (number, sheet), in number order, to change.
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&u32, &mut SheetCheckpoint)> {
        self.0.iter_mut().map(|(n, b)| (n, &mut **b))
    }

    /// (number, sheet) for the numbers in `range`.
    pub fn range<R: RangeBounds<u32>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&u32, &SheetCheckpoint)> {
        self.0.range(range).map(|(n, b)| (n, &**b))
    }

    /// Keep only the sheets `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&u32, &mut SheetCheckpoint) -> bool) {
        self.0.retain(|n, b| keep(n, b));
    }
}

impl Index<&u32> for SheetMap {
    type Output = SheetCheckpoint;

    fn index(&self, num: &u32) -> &SheetCheckpoint {
        &self.0[num]
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
    type IntoIter = std::iter::Map<
        std::collections::btree_map::IntoIter<u32, Box<SheetCheckpoint>>,
        fn((u32, Box<SheetCheckpoint>)) -> (u32, SheetCheckpoint),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().map(|(n, b)| (n, *b))
    }
}

impl FromIterator<(u32, SheetCheckpoint)> for SheetMap {
    fn from_iter<I: IntoIterator<Item = (u32, SheetCheckpoint)>>(iter: I) -> SheetMap {
        SheetMap(iter.into_iter().map(|(n, s)| (n, Box::new(s))).collect())
    }
}

impl Extend<(u32, SheetCheckpoint)> for SheetMap {
    fn extend<I: IntoIterator<Item = (u32, SheetCheckpoint)>>(&mut self, iter: I) {
        self.0
            .extend(iter.into_iter().map(|(n, s)| (n, Box::new(s))));
    }
}

impl<const N: usize> From<[(u32, SheetCheckpoint); N]> for SheetMap {
    fn from(sheets: [(u32, SheetCheckpoint); N]) -> SheetMap {
        sheets.into_iter().collect()
    }
}

impl Serialize for SheetMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The same document as the `BTreeMap<u32, SheetCheckpoint>` it replaces.
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SheetMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SheetMap, D::Error> {
        BTreeMap::<u32, Box<SheetCheckpoint>>::deserialize(deserializer).map(SheetMap)
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
}
