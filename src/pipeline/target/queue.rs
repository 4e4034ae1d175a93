//! The queue of staged windows: the group a commit takes, and the windows that join a commit
//! rebuilt after a lost race.

use super::{MAX_WINDOWS_PER_COMMIT, Pending, Target, overwrite};

impl Target {
    /// Queued windows for one commit: distinct windows, oldest first.
    pub(super) fn take_group(&self) -> Vec<Pending> {
        let mut pending = self.pending.lock().expect("not poisoned");
        let mut seen = std::collections::HashSet::new();
        let mut group = Vec::new();
        let mut rest = Vec::new();
        for p in pending.drain(..) {
            if group.len() < MAX_WINDOWS_PER_COMMIT && seen.insert(p.window.tags.window.clone()) {
                group.push(p);
            } else {
                rest.push(p);
            }
        }
        *pending = rest;
        group
    }

    /// The queued windows that may join a commit of `group` being rebuilt after a lost race
    /// (taken out of the queue when `take`): distinct windows not in it, which change no
    /// metadata, up to [`MAX_WINDOWS_PER_COMMIT`] in all; `None` when there are none.
    pub(super) fn joinable(
        &self,
        group: &[overwrite::WindowCommit],
        take: bool,
    ) -> Option<Vec<Pending>> {
        let mut pending = self.pending.lock().expect("not poisoned");
        let mut seen: std::collections::HashSet<&str> =
            group.iter().map(|w| w.tags.window.as_str()).collect();
        let mut room = MAX_WINDOWS_PER_COMMIT.saturating_sub(group.len());
        let mut joining = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            if room > 0 && p.window.metadata.is_none() && seen.insert(&p.window.tags.window) {
                joining.push(i);
                room -= 1;
            }
        }
        if joining.is_empty() {
            return None;
        }
        if !take {
            return Some(Vec::new());
        }
        let mut out = Vec::new();
        for i in joining.into_iter().rev() {
            out.push(pending.remove(i));
        }
        out.reverse();
        Some(out)
    }
}
