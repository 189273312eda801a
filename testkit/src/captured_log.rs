//! The log of a service process a test started (services log to stdout), collected line by
//! line while it runs, for tests that check what it logs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{KilledOnDrop, eventually};

#[derive(Debug, Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<String>>>);

impl CapturedLog {
    /// Spawns `command` with its stdout collected into the returned log.
    pub fn spawn(command: &mut Command) -> (KilledOnDrop, Self) {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("the process starts");
        let log = Self::default();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn({
            let log = log.clone();
            move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Ok(mut lines) = log.0.lock() {
                        lines.push(line);
                    }
                }
            }
        });
        (KilledOnDrop(child), log)
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits (up to 30 s) for a line `matches` accepts, and returns it.
    pub async fn await_line(&self, matches: impl Fn(&str) -> bool) -> String {
        eventually(Duration::from_secs(30), || async {
            self.lines().into_iter().find(|line| matches(line))
        })
        .await
    }
}
