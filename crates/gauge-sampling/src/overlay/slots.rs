//! Where each edited id's edit sits in the overlay's list: a small open-addressing table keyed by
//! id, sized to the edits rather than to the vocabulary. A table with an entry per id (600 KB at
//! 151,936) took a cache miss for every edit once the model's forward pass had evicted it; this
//! one holds twice the step's edits (1 KB for 64) and is cleared entry by entry.

/// `id -> slot` for the ids edited this step.
#[derive(Clone, Debug, Default)]
pub(super) struct Slots {
    /// `[id + 1, slot]` per position; `id + 1 == 0` marks an empty one. The length is a power of
    /// two, at least twice the number of entries.
    table: Vec<[u32; 2]>,
    /// Positions in use, so clearing costs the entries, not the table.
    used: Vec<u32>,
}

impl Slots {
    /// The slot of `id`, which must have been inserted since the last `clear`.
    #[inline]
    pub(super) fn get(&self, id: u32) -> u32 {
        let mask = self.table.len() - 1;
        let mut at = Self::home(id, mask);
        loop {
            let [key, slot] = self.table[at];
            if key == id.wrapping_add(1) {
                return slot;
            }
            debug_assert!(key != 0, "id {id} not in the slot table");
            at = (at + 1) & mask;
        }
    }

    /// Record `id -> slot` for an id not yet in the table.
    #[inline]
    pub(super) fn insert(&mut self, id: u32, slot: u32) {
        if 2 * (self.used.len() + 1) > self.table.len() {
            self.grow();
        }
        self.place(id, slot);
    }

    /// Forget every entry.
    pub(super) fn clear(&mut self) {
        for &at in &self.used {
            self.table[at as usize] = [0, 0];
        }
        self.used.clear();
    }

    #[inline]
    fn home(id: u32, mask: usize) -> usize {
        // Fibonacci hashing: nearby ids (a chunk's) land far apart
        (id.wrapping_mul(0x9E37_79B1) as usize >> 7) & mask
    }

    fn place(&mut self, id: u32, slot: u32) {
        let mask = self.table.len() - 1;
        let mut at = Self::home(id, mask);
        while self.table[at][0] != 0 {
            at = (at + 1) & mask;
        }
        self.table[at] = [id.wrapping_add(1), slot];
        self.used.push(at as u32);
    }

    #[cold]
    fn grow(&mut self) {
        let old: Vec<[u32; 2]> = self
            .used
            .iter()
            .map(|&at| self.table[at as usize])
            .collect();
        let len = (self.table.len() * 2).max(128);
        self.table = vec![[0, 0]; len];
        self.used.clear();
        for [key, slot] in old {
            self.place(key.wrapping_sub(1), slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries inserted across growths are all found, ids that collide (multiples of the table
    /// size) and the largest id included; a cleared table takes new entries for the same ids.
    #[test]
    fn inserted_ids_are_found_across_growth_and_clearing() {
        let mut s = Slots::default();
        for round in 0..3u32 {
            let ids: Vec<u32> = (0..500u32)
                .map(|i| {
                    if i % 3 == 0 {
                        i * 128
                    } else {
                        i * 7919 + round
                    }
                })
                .chain([u32::MAX - 1])
                .collect();
            for (slot, &id) in ids.iter().enumerate() {
                s.insert(id, slot as u32 + round);
            }
            for (slot, &id) in ids.iter().enumerate() {
                assert_eq!(s.get(id), slot as u32 + round, "round {round} id {id}");
            }
            assert!(s.table.len() >= 2 * ids.len());
            s.clear();
            assert!(s.table.iter().all(|e| e[0] == 0));
        }
    }
}
