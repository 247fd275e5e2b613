//! A job's memory, held in child processes of the listener so the service meters a real
//! process tree (`JobSpec::memory`). Each child allocates its share, touches every page (so it
//! is resident), and holds it until its stdin closes: when the job ends, or when the listener
//! dies, so nothing outlives the runner.

use std::io::Read;
use std::process::{Child, Command, Stdio};

const PAGE: usize = 4096;

/// The children holding a job's memory; dropping them ends them.
pub struct Holders {
    children: Vec<Child>,
}

impl Holders {
    /// Starts `children.max(1)` holders sharing `mb` MiB (none when `mb` is 0).
    pub fn start(mb: u32, children: u32) -> std::io::Result<Holders> {
        let mut out = Holders {
            children: Vec::new(),
        };
        if mb == 0 {
            return Ok(out);
        }
        let n = children.max(1);
        let exe = std::env::current_exe()?;
        for i in 0..n {
            // The first child takes the remainder.
            let share = mb / n + if i == 0 { mb % n } else { 0 };
            let child = Command::new(&exe)
                .arg("hold-memory")
                .arg(share.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()?;
            out.children.push(child);
        }
        Ok(out)
    }

    pub fn count(&self) -> usize {
        self.children.len()
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        for c in &mut self.children {
            drop(c.stdin.take());
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// `hold-memory MB`: allocate and touch `MB` MiB, then hold it until stdin closes.
pub fn hold(mb: Option<&str>) -> i32 {
    let Some(mb) = mb.and_then(|m| m.parse::<usize>().ok()) else {
        eprintln!("hold-memory needs a size in MiB");
        return 2;
    };
    let mut block = vec![0u8; mb << 20];
    for i in (0..block.len()).step_by(PAGE) {
        block[i] = 1;
    }
    // Keep the writes: the block must stay resident, not be optimised away.
    std::hint::black_box(&block);
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(&block);
    0
}
