//! Leases: which tasks this runner works on. Claimed before a task is started (`FOR
//! UPDATE SKIP LOCKED` on PostgreSQL), renewed at a third of their lifetime, released
//! when the runner stops; a dead runner's leases on this host are taken over at once.

use std::collections::BTreeMap;
use std::time::Instant;

use warden_core::model::TaskId;
use warden_store::EngineError;

use super::Supervisor;
use super::host::alive;

/// This runner's name in leases: `host:pid:start`, the start time (in microseconds)
/// telling apart runners on machines (containers) that share a host name and pid.
pub fn owner_id() -> String {
    let start = jiff::Timestamp::now().as_microsecond();
    format!("{}:{}:{start:x}", this_host(), std::process::id())
}

/// This machine's host name, as lease owners name it.
pub(crate) fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Is the process `pid` of this machine alive?
pub(crate) fn pid_alive(pid: u32) -> bool {
    alive(pid)
}

pub(super) use crate::status::owner_host_pid;

impl Supervisor {
    pub(super) fn renew(&mut self) {
        self.last_renew = Instant::now();
        let now = self.app.eng.now();
        for id in self.leased.keys().cloned().collect::<Vec<_>>() {
            match self
                .app
                .eng
                .store
                .acquire_lease(&id, &self.owner, now, self.opts.lease_ttl)
            {
                // Another runner took it over: drop the task (its step's next write is
                // refused by the fence).
                Ok(None) => {
                    self.leased.remove(&id);
                }
                Ok(Some(l)) => {
                    self.leased.insert(id, l.epoch);
                }
                Err(_) => {}
            }
        }
    }

    pub(super) fn release_all(&mut self) {
        for id in std::mem::take(&mut self.leased).into_keys() {
            let _ = self.app.eng.store.release_lease(&id, &self.owner);
        }
        self.release_abandoned();
    }

    /// Releases the leases other runners left behind: held by a runner on this host whose
    /// process is gone, or lapsed. A runner killed between finishing a task and releasing
    /// its lease would otherwise hold that lease for ever, since a finished task is never
    /// claimed again. Each release names the holder, so a lease renewed or taken over
    /// meanwhile is left alone.
    pub(super) fn release_abandoned(&self) {
        let now = self.app.eng.now();
        let Ok(leases) = self.app.eng.store.leases() else {
            return;
        };
        for l in leases {
            if l.owner != self.owner && (self.dead_here(&l.owner) || l.expires_at <= now) {
                let _ = self.app.eng.store.release_lease(&l.task, &l.owner);
            }
        }
    }

    /// Is this lease owner a runner on this host whose process is gone? It will never
    /// renew, so its tasks are taken over at once instead of after the expiry.
    pub(super) fn dead_here(&self, owner: &str) -> bool {
        let host = owner_host_pid(&self.owner).map(|(h, _)| h);
        matches!(owner_host_pid(owner), Some((h, pid)) if Some(h) == host && !alive(pid))
    }

    /// Claims leases on up to `max` of `wanted` (in order) that nobody else holds. Tasks
    /// already ours come first; the rest are claimed in one store call (`FOR UPDATE SKIP
    /// LOCKED` on PostgreSQL, so runners never wait on each other's candidates); then
    /// tasks held by a dead runner on this host are taken over.
    pub(super) fn claim(
        &mut self,
        wanted: &[TaskId],
        max: usize,
    ) -> Result<Vec<TaskId>, EngineError> {
        let mut got: Vec<TaskId> = wanted
            .iter()
            .filter(|id| self.leased.contains_key(*id))
            .take(max)
            .cloned()
            .collect();
        let rest: Vec<TaskId> = wanted
            .iter()
            .filter(|id| !self.leased.contains_key(*id))
            .cloned()
            .collect();
        if got.len() >= max || rest.is_empty() {
            return Ok(got);
        }
        let now = self.app.eng.now();
        let ttl = self.opts.lease_ttl;
        let claimed = self
            .app
            .eng
            .store
            .claim(&rest, &self.owner, now, ttl, max - got.len())?;
        for l in claimed {
            self.leased.insert(l.task.clone(), l.epoch);
            got.push(l.task);
        }
        if got.len() < max {
            let held: BTreeMap<TaskId, String> = self
                .app
                .eng
                .store
                .leases()?
                .into_iter()
                .map(|l| (l.task, l.owner))
                .collect();
            for id in &rest {
                if got.len() >= max {
                    break;
                }
                if got.contains(id) {
                    continue;
                }
                if let Some(o) = held.get(id)
                    && o != &self.owner
                    && self.dead_here(o)
                {
                    self.app.eng.store.release_lease(id, o)?;
                    if let Some(l) = self
                        .app
                        .eng
                        .store
                        .acquire_lease(id, &self.owner, now, ttl)?
                    {
                        self.leased.insert(id.clone(), l.epoch);
                        got.push(id.clone());
                    }
                }
            }
        }
        // Back in the scheduling order.
        Ok(wanted
            .iter()
            .filter(|id| got.contains(id))
            .cloned()
            .collect())
    }

    pub(super) fn release(&mut self, id: &TaskId) {
        if self.leased.remove(id).is_some() {
            let _ = self.app.eng.store.release_lease(id, &self.owner);
        }
    }
}
