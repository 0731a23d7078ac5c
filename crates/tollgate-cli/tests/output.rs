//! `replay --output` on what a path can be: a regular file with its mode, a
//! symbolic link, a FIFO, a device, a directory; and the temporary file of
//! a run ended by a signal.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use common::entries;

const GCRA: [&str; 3] = ["gcra", "1", "1s"];

const TRACE: &str = "t_ns,key,cost\n0,k,1\n0,k,1\n";
const DECISIONS: &str =
    "t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns\n0,k,1,1,0,0,0\n0,k,1,0,0,1000000000,0\n";

/// Replays [`TRACE`] into `output`, which must succeed.
fn replay_into(output: &Path) {
    let args = ["fixed_window", "1", "1s"];
    let out = common::run(
        &common::replay_args(args, &["--output", output.to_str().unwrap()]),
        TRACE,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty() && stderr.is_empty(), "{stderr}");
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

#[test]
fn a_regular_file_is_replaced_keeping_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    for bits in [0o600, 0o640, 0o604] {
        let file = dir.path().join("out.csv");
        fs::write(&file, "old").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(bits)).unwrap();
        replay_into(&file);
        assert_eq!(fs::read_to_string(&file).unwrap(), DECISIONS);
        assert_eq!(mode(&file), bits);
        assert_eq!(entries(dir.path()), ["out.csv"]);
    }
}

#[test]
fn a_symbolic_link_is_followed_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fs::create_dir(&data).unwrap();
    let real = data.join("real.csv");
    fs::write(&real, "old").unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
    // A relative link to a relative link.
    let hop = dir.path().join("hop.csv");
    std::os::unix::fs::symlink("data/real.csv", &hop).unwrap();
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink("hop.csv", &link).unwrap();
    replay_into(&link);
    assert_eq!(fs::read_to_string(&real).unwrap(), DECISIONS);
    assert_eq!(mode(&real), 0o600);
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("hop.csv"));
    assert_eq!(fs::read_link(&hop).unwrap(), Path::new("data/real.csv"));
    assert_eq!(entries(&data), ["real.csv"]);

    // A link to a file that does not exist yet creates that file.
    let dangling = dir.path().join("dangling.csv");
    std::os::unix::fs::symlink("data/new.csv", &dangling).unwrap();
    replay_into(&dangling);
    assert_eq!(fs::read_to_string(data.join("new.csv")).unwrap(), DECISIONS);
    assert!(fs::symlink_metadata(&dangling).unwrap().is_symlink());
}

#[test]
fn a_fifo_is_written_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert_eq!(unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
    };
    replay_into(&fifo);
    // Checked first: had the FIFO been replaced, the reader would wait on
    // it forever.
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(entries(dir.path()), ["fifo"]);
    assert_eq!(reader.join().unwrap(), DECISIONS);
}

#[test]
fn a_character_device_is_written_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    // Through a link, so that nothing outside the test directory could be
    // replaced even by a build of tollgate without this fix.
    let null = dir.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    replay_into(&null);
    assert!(fs::symlink_metadata(&null).unwrap().is_symlink());
    assert!(fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    assert_eq!(entries(dir.path()), ["null"]);

    // A device node of our own, where we may make one (as root).
    let node = dir.path().join("node");
    let dev_null = libc::makedev(1, 3);
    if unsafe { libc::mknod(c_path(&node).as_ptr(), libc::S_IFCHR | 0o666, dev_null) } == 0 {
        replay_into(&node);
        assert!(fs::metadata(&node).unwrap().file_type().is_char_device());
        assert_eq!(entries(dir.path()), ["node", "null"]);
    }
}

/// Runs a replay into `target`, which must be refused with `why`.
fn refused(target: &Path, why: &str) {
    let output = ["--output", target.to_str().unwrap()];
    let out = common::run(&common::replay_args(GCRA, &output), TRACE);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("tollgate: cannot create `{}`: {why}\n", target.display())
    );
}

#[test]
fn a_directory_or_a_socket_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    refused(dir.path(), "it is a directory");
    assert!(entries(dir.path()).is_empty());
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    refused(&socket, "it is a socket");
    assert!(fs::metadata(&socket).unwrap().file_type().is_socket());
    assert_eq!(entries(dir.path()), ["socket"]);
}

/// A replay into an existing file, stopped by `signal` while it waits for
/// input: the temporary file goes, the old file stays, and the process
/// still ends by that signal.
fn interrupted_by(signal: i32) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.csv");
    fs::write(&file, "old").unwrap();
    let mut child = common::spawn(&common::replay_args(
        GCRA,
        &["--output", file.to_str().unwrap()],
    ));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(TRACE.as_bytes()).unwrap();
    // The temporary file exists once the handler is in place.
    let start = Instant::now();
    while entries(dir.path()).len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no temporary file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let status = child.wait().unwrap();
    drop(stdin);
    let mut stderr = String::new();
    child.stderr.unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.signal(), Some(signal), "{stderr}");
    assert_eq!(entries(dir.path()), ["out.csv"]);
    assert_eq!(fs::read_to_string(&file).unwrap(), "old");
}

#[test]
fn sigterm_removes_the_temporary_file() {
    interrupted_by(libc::SIGTERM);
}

#[test]
fn sigint_removes_the_temporary_file() {
    interrupted_by(libc::SIGINT);
}
