//! A [`process_wrap`] layer for tokio hosts (rmcp's `TokioChildProcess` takes a
//! `CommandWrap`): one `.wrap(Guard::new(supervisor))` and the spawned process, with
//! everything it starts, is a tree of an `undertaker supervise` this process owns.
//!
//! The process is started by the host (process-wrap spawns it), then handed over with
//! `adopt` right after spawn, with a pidfd of it as the proof (docs/SUPERVISE.md). Until that
//! reply, the tree is not guarded yet; a process it double-forked before the reply is
//! only contained in the cgroup tier. Killing the wrapped child (rmcp does on drop) also
//! tears the whole tree down, on a background thread.

use crate::client::Supervisor;
use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};
use std::io;
use std::sync::{Arc, Mutex};
use tokio::process::{Child, Command};

/// The wrapper to add: `CommandWrap::with_new(..).wrap(Guard::new(supervisor))`.
#[derive(Clone)]
pub struct Guard {
    supervisor: Arc<Supervisor>,
    tree: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("supervisor", &self.supervisor.pid())
            .field("tree", &self.tree())
            .finish()
    }
}

impl Guard {
    pub fn new(supervisor: Arc<Supervisor>) -> Self {
        Self {
            supervisor,
            tree: Arc::new(Mutex::new(None)),
        }
    }

    /// The tree id, once the spawned process was adopted.
    pub fn tree(&self) -> Option<String> {
        self.tree.lock().ok().and_then(|t| t.clone())
    }
}

impl CommandWrapper for Guard {
    fn post_spawn(
        &mut self,
        _command: &mut Command,
        child: &mut Child,
        _core: &CommandWrap,
    ) -> io::Result<()> {
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the child exited before it could be guarded"))?;
        // Our unreaped child: a pidfd opened now names it, and is the proof we pass.
        let pidfd = crate::linux::proof::pidref::PidRef::open(pid as i32)
            .ok()
            .map(crate::linux::proof::pidref::PidRef::into_fd);
        let adopted = match &pidfd {
            Some(fd) => self.supervisor.adopt_pidfd(rustix::fd::AsFd::as_fd(fd)),
            None => self.supervisor.adopt(pid),
        };
        match adopted {
            Ok(tree) => {
                if let Ok(mut slot) = self.tree.lock() {
                    *slot = Some(tree);
                }
                Ok(())
            }
            Err(e) => {
                // Never leave an unguarded process behind a failed spawn.
                let _ = child.start_kill();
                Err(e)
            }
        }
    }

    fn wrap_child(
        &mut self,
        inner: Box<dyn ChildWrapper>,
        _core: &CommandWrap,
    ) -> io::Result<Box<dyn ChildWrapper>> {
        Ok(Box::new(GuardedChild {
            inner,
            supervisor: Arc::clone(&self.supervisor),
            tree: self.tree(),
        }))
    }
}

/// The wrapped child: killing it tears its whole tree down.
pub struct GuardedChild {
    inner: Box<dyn ChildWrapper>,
    supervisor: Arc<Supervisor>,
    tree: Option<String>,
}

impl std::fmt::Debug for GuardedChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedChild")
            .field("inner", &self.inner)
            .field("tree", &self.tree)
            .finish()
    }
}

impl GuardedChild {
    pub fn tree(&self) -> Option<&str> {
        self.tree.as_deref()
    }
}

impl ChildWrapper for GuardedChild {
    fn inner(&self) -> &dyn ChildWrapper {
        self.inner.as_ref()
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.inner.as_mut()
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.inner
    }

    fn start_kill(&mut self) -> io::Result<()> {
        if let Some(tree) = self.tree.take() {
            // The supervisor's teardown takes up to the grace period: not on the
            // caller's (async) thread.
            let supervisor = Arc::clone(&self.supervisor);
            let _ = std::thread::Builder::new()
                .name("undertaker-kill".into())
                .spawn(move || supervisor.kill_tree(&tree));
        }
        self.inner.start_kill()
    }
}
