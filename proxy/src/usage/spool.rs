//! The usage spool: a folder holding every usage batch the proxy has taken from its queue
//! and the ledger has not acknowledged yet, so usage survives a restart of the proxy
//! (graceful or not) while the control plane is unreachable.
//!
//! A batch is one file, `<batch id>.json`, holding exactly the body that is posted: it is
//! written whole under a temporary name, flushed to disk (`fsync` of the file, then of
//! the folder after the rename), and deleted once the ledger acknowledges it. On start
//! the proxy sends the batches an earlier run left, oldest first, under their own batch
//! ids; the ledger counts a record id once, so a batch sent twice (its acknowledgement
//! lost to the restart) is never counted twice. Half-written files are removed on start.
//!
//! The folder is bounded (`usage_spool_max_mb`): a batch that does not fit is kept in
//! memory only, as without a spool, and counted in `warden_proxy_usage_unspooled_total`.
//!
//! A batch the ledger will not take (refused, or failed with a server error of its own
//! `flush::MAX_BATCH_FAULTS` times) is set aside in the `set-aside/` subfolder, so it
//! stops holding back the batches behind it and is not lost. The next start offers the
//! set-aside batches again (moved back into the spool, sent first); `warden spool`
//! lists, replays and discards them meanwhile ([`SetAsideBatch`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

const SUFFIX: &str = ".json";
const PARTIAL: &str = ".json.partial";
/// The subfolder of batches set aside.
pub const SET_ASIDE: &str = "set-aside";

/// A spool just opened, with the ids of the batches an earlier run left in it, oldest
/// first: they are sent before any new batch.
pub struct OpenSpool {
    pub spool: Arc<Spool>,
    pub left: Vec<String>,
}

/// The spool folder and the bytes its batches take.
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    used: AtomicU64,
}

impl Spool {
    /// Opens `dir` (creating it) and removes what a crash left half-written.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<OpenSpool> {
        std::fs::create_dir_all(dir)?;
        let offered = offer_set_aside_again(dir)?;
        if offered > 0 {
            tracing::warn!(
                batches = offered,
                dir = %dir.join(SET_ASIDE).display(),
                "offering the usage batches set aside by an earlier run again"
            );
        }
        let mut left = Vec::new();
        let mut used = 0;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(PARTIAL) {
                std::fs::remove_file(entry.path())?;
            } else if let Some(batch_id) = name.strip_suffix(SUFFIX) {
                used += entry.metadata()?.len();
                left.push(batch_id.to_owned());
            }
        }
        // Batch ids are time-ordered ULIDs: by name is oldest first.
        left.sort();
        let spool = Spool {
            dir: dir.to_owned(),
            max_bytes,
            used: AtomicU64::new(used),
        };
        Ok(OpenSpool {
            spool: Arc::new(spool),
            left,
        })
    }

    /// Writes batch `batch_id` durably; false when it does not fit or cannot be written
    /// (logged), in which case it lives in memory only.
    pub async fn write(self: &Arc<Self>, batch_id: &str, body: &Bytes) -> bool {
        let size = body.len() as u64;
        if self.used.fetch_add(size, Ordering::Relaxed) + size > self.max_bytes {
            self.used.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        let spool = self.clone();
        let (batch_id, body) = (batch_id.to_owned(), body.clone());
        let written = tokio::task::spawn_blocking(move || spool.write_file(&batch_id, &body))
            .await
            .unwrap_or_else(|join| Err(std::io::Error::other(join)));
        match written {
            Ok(()) => true,
            Err(error) => {
                self.used.fetch_sub(size, Ordering::Relaxed);
                tracing::error!(%error, dir = %self.dir.display(), "cannot write a usage batch to the spool; it is held in memory only");
                false
            }
        }
    }

    fn write_file(&self, batch_id: &str, body: &[u8]) -> std::io::Result<()> {
        let partial = self.dir.join(format!("{batch_id}{PARTIAL}"));
        let mut file = std::fs::File::create(&partial)?;
        file.write_all(body)?;
        file.sync_all()?;
        std::fs::rename(&partial, self.path(batch_id))?;
        // The rename is durable once the folder is.
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// The body of a batch an earlier run left.
    pub async fn read(&self, batch_id: &str) -> std::io::Result<Bytes> {
        tokio::fs::read(self.path(batch_id)).await.map(Bytes::from)
    }

    /// Deletes an acknowledged batch (or one the ledger refused whole).
    pub async fn remove(&self, batch_id: &str) {
        let path = self.path(batch_id);
        let size = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                self.used.fetch_sub(size, Ordering::Relaxed);
            }
            Err(error) => {
                // Sent again on the next start; the ledger counts its records once.
                tracing::warn!(%error, %batch_id, "cannot remove an acknowledged usage batch from the spool");
            }
        }
    }

    fn path(&self, batch_id: &str) -> PathBuf {
        self.dir.join(format!("{batch_id}{SUFFIX}"))
    }

    /// Sets batch `batch_id` aside (see the module documentation): moved from the spool
    /// when `spooled`, written there otherwise. False when it could not be kept (logged).
    pub async fn set_aside(self: &Arc<Self>, batch_id: &str, body: &Bytes, spooled: bool) -> bool {
        let spool = self.clone();
        let (batch_id, body) = (batch_id.to_owned(), body.clone());
        let id = batch_id.clone();
        let kept = tokio::task::spawn_blocking(move || {
            let aside = spool.dir.join(SET_ASIDE);
            std::fs::create_dir_all(&aside)?;
            let target = aside.join(format!("{batch_id}{SUFFIX}"));
            if spooled {
                std::fs::rename(spool.path(&batch_id), &target)?;
            } else {
                let partial = aside.join(format!("{batch_id}{PARTIAL}"));
                let mut file = std::fs::File::create(&partial)?;
                file.write_all(&body)?;
                file.sync_all()?;
                std::fs::rename(&partial, &target)?;
            }
            std::fs::File::open(&aside)?.sync_all()
        })
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join)));
        match kept {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, batch_id = %id, "cannot set a usage batch aside; it is lost");
                false
            }
        }
    }
}

/// Moves the batches set aside back into the spool folder; how many.
fn offer_set_aside_again(dir: &Path) -> std::io::Result<usize> {
    let aside = dir.join(SET_ASIDE);
    if !aside.is_dir() {
        return Ok(0);
    }
    let mut moved = 0;
    for entry in std::fs::read_dir(&aside)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(PARTIAL) {
            std::fs::remove_file(entry.path())?;
        } else if name.ends_with(SUFFIX) {
            std::fs::rename(entry.path(), dir.join(name))?;
            moved += 1;
        }
    }
    Ok(moved)
}

/// How many records the batch `body` holds; `None` when it is not a batch.
pub fn records_in(body: &[u8]) -> Option<usize> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|batch| batch.get("records")?.as_array().map(Vec::len))
}

/// A batch set aside, as `warden spool list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAsideBatch {
    pub batch_id: String,
    pub bytes: u64,
    /// Records in it; `None` when the file is not a batch.
    pub records: Option<usize>,
}

impl SetAsideBatch {
    /// The batches set aside in spool folder `dir`, oldest first.
    pub fn list(dir: &Path) -> std::io::Result<Vec<SetAsideBatch>> {
        let aside = dir.join(SET_ASIDE);
        if !aside.is_dir() {
            return Ok(Vec::new());
        }
        let mut batches = Vec::new();
        for entry in std::fs::read_dir(&aside)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(batch_id) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            let body = std::fs::read(entry.path())?;
            let records = records_in(&body);
            batches.push(SetAsideBatch {
                batch_id: batch_id.to_owned(),
                bytes: body.len() as u64,
                records,
            });
        }
        batches.sort_by(|a, b| a.batch_id.cmp(&b.batch_id));
        Ok(batches)
    }

    /// The body to post again.
    pub fn read(dir: &Path, batch_id: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(Self::path(dir, batch_id)?)
    }

    /// Deletes the batch for good.
    pub fn discard(dir: &Path, batch_id: &str) -> std::io::Result<()> {
        std::fs::remove_file(Self::path(dir, batch_id)?)
    }

    /// A batch id is a file name in the folder, never a path.
    fn path(dir: &Path, batch_id: &str) -> std::io::Result<PathBuf> {
        let plain = !batch_id.is_empty()
            && batch_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !plain {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a batch id: {batch_id:?}"),
            ));
        }
        Ok(dir.join(SET_ASIDE).join(format!("{batch_id}{SUFFIX}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_left_by_a_run_come_back_oldest_first_and_partial_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let OpenSpool { spool, left } = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(left.is_empty());
        assert!(
            spool
                .write("use_02", &Bytes::from_static(b"{\"b\":2}"))
                .await
        );
        assert!(
            spool
                .write("use_01", &Bytes::from_static(b"{\"b\":1}"))
                .await
        );
        assert!(
            spool
                .write("use_03", &Bytes::from_static(b"{\"b\":3}"))
                .await
        );
        spool.remove("use_03").await;
        std::fs::write(dir.path().join("use_04.json.partial"), b"{\"b\"").unwrap();
        drop(spool);

        let OpenSpool { spool, left } = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(left, ["use_01", "use_02"]);
        assert_eq!(&spool.read("use_02").await.unwrap()[..], b"{\"b\":2}");
        assert!(!dir.path().join("use_04.json.partial").exists());
        assert_eq!(spool.used.load(Ordering::Relaxed), 14);
    }

    #[tokio::test]
    async fn a_batch_set_aside_is_listed_and_offered_again_on_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap().spool;
        let body = Bytes::from_static(b"{\"batch_id\":\"use_01\",\"records\":[{},{}]}");
        assert!(spool.write("use_01", &body).await);
        assert!(spool.set_aside("use_01", &body, true).await);
        assert!(
            spool
                .set_aside("use_02", &Bytes::from_static(b"{}"), false)
                .await
        );
        let listed = SetAsideBatch::list(dir.path()).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].batch_id, "use_01");
        assert_eq!(listed[0].records, Some(2));
        assert_eq!(listed[1].records, None);
        assert!(SetAsideBatch::read(dir.path(), "../use_01").is_err());
        SetAsideBatch::discard(dir.path(), "use_02").unwrap();
        drop(spool);

        let OpenSpool { left, .. } = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(left, ["use_01"]);
        assert!(SetAsideBatch::list(dir.path()).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_full_spool_refuses_a_batch_and_takes_one_again_once_room_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 10).unwrap().spool;
        assert!(spool.write("use_01", &Bytes::from_static(b"123456")).await);
        assert!(!spool.write("use_02", &Bytes::from_static(b"123456")).await);
        spool.remove("use_01").await;
        assert!(spool.write("use_02", &Bytes::from_static(b"123456")).await);
        let left = Spool::open(dir.path(), 10).unwrap().left;
        assert_eq!(left, ["use_02"]);
    }
}
