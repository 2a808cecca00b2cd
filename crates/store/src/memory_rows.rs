//! Memory as both stores keep it: one row per list item (`memory_items`) and one row per
//! task for the focus (`memory_focus`, which also says the task has memory). These turn
//! the rows back into [`Memory`] values, the same way for SQLite and PostgreSQL.

use std::collections::BTreeMap;

use warden_core::memory::Memory;
use warden_core::model::TaskId;

use crate::StoreError;

/// Adds a stored item to its list of `m`.
pub(crate) fn push_item(
    m: &mut Memory,
    task: &str,
    list: i64,
    text: String,
) -> Result<(), StoreError> {
    let slot = usize::try_from(list).ok().and_then(|i| m.list_mut(i));
    let Some(slot) = slot else {
        return Err(StoreError::Decode {
            what: format!("memory of {task}"),
            detail: format!("an item of list {list}, which does not exist"),
        });
    };
    slot.push(text);
    Ok(())
}

/// Every task's memory, built from its focus row and then its items (in list and seq
/// order), sorted by task id.
#[derive(Debug, Default)]
pub(crate) struct AllMemory(BTreeMap<String, Memory>);

impl AllMemory {
    /// A task's focus row: the task has memory.
    pub(crate) fn focus(&mut self, task: String, next_focus: String) {
        self.0.insert(
            task,
            Memory {
                next_focus,
                ..Memory::default()
            },
        );
    }

    /// One item; its task must have a focus row.
    pub(crate) fn item(&mut self, task: &str, list: i64, text: String) -> Result<(), StoreError> {
        let m = self.0.get_mut(task).ok_or_else(|| StoreError::Decode {
            what: format!("memory of {task}"),
            detail: "items stored without the task's memory row".into(),
        })?;
        push_item(m, task, list, text)
    }

    /// The memories, sorted by task id.
    pub(crate) fn finish(self) -> Result<Vec<(TaskId, Memory)>, StoreError> {
        self.0
            .into_iter()
            .map(|(id, m)| {
                let tid = TaskId::new(&id).map_err(|e| StoreError::Decode {
                    what: format!("memory of {id}"),
                    detail: e.to_string(),
                })?;
                Ok((tid, m))
            })
            .collect()
    }
}

/// The memory both stores' migration tests write the old way (one JSON row) for task `a`,
/// beside an empty one for `b`.
#[cfg(test)]
pub(crate) fn migration_sample() -> Memory {
    Memory {
        goals: vec!["g1".into(), "g2 ünï".into()],
        decisions: (0..12).map(|i| format!("d{i}")).collect(),
        history: vec!["h1".into(), "h2".into()],
        open_issues: vec!["o".into()],
        next_focus: "f".into(),
        ..Memory::default()
    }
}

/// After a migration of [`migration_sample`]: every memory reads back as it was, in
/// order, and a merge continues after the migrated items.
#[cfg(test)]
pub(crate) fn check_migrated(s: &dyn crate::Store) {
    use warden_core::memory::{self, MemoryCaps, MemoryDelta};
    let id = |s: &str| TaskId::new(s).unwrap();
    let old = migration_sample();
    assert_eq!(s.memory(&id("a")).unwrap(), Some(old.clone()));
    assert_eq!(s.memory(&id("b")).unwrap(), Some(Memory::default()));
    assert_eq!(s.memory(&id("c")).unwrap(), None);
    assert_eq!(s.all_memory().unwrap().len(), 2);
    let caps = MemoryCaps::default();
    let d = MemoryDelta {
        decisions: vec!["d12".into()],
        history: vec!["h3".into(), "h4".into()],
        ..Default::default()
    };
    s.commit(crate::Batch {
        memory: vec![(id("a"), memory::append_of(&d, &caps))],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        s.memory(&id("a")).unwrap(),
        Some(memory::merge(&old, &d, &caps))
    );
}
