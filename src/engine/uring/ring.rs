//! The ring of one rank, and the memory its operations point into.
//!
//! Every pointer an SQE carries points into memory this struct owns: a request buffer and a
//! scratch buffer per connection, the registered [`BufferPool`], the eventfd's 8-byte counter,
//! the compute timer's timespec. Each connection has at most one operation in flight (asserted),
//! and its buffers can only be touched by Rust code while none is ([`Ring::request_buffer`] and
//! [`Ring::scratch`] assert it). On drop every operation still in flight is cancelled and reaped
//! before the memory goes; if the kernel does not give them back in time the memory is leaked
//! rather than freed under it. So the engine above is safe code, and this file and `pool.rs` are
//! the only places with `unsafe`.
//!
//! The ring is created in the rank's thread with `SINGLE_ISSUER | DEFER_TASKRUN` (completions
//! run in this thread, when it enters the kernel to wait, and nowhere else) and no SQPOLL: the
//! thread blocks only in `io_uring_enter`.
#![allow(unsafe_code)]

use std::io;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use io_uring::types::{CancelBuilder, Fd, SubmitArgs, Timespec};
use io_uring::{IoUring, opcode, squeue};

use crate::engine::pool::{BufIndex, BufferPool};

/// `user_data` of the compute timer.
pub const COMPUTE_TAG: u64 = u64::MAX - 1;
/// `user_data` of the eventfd read that wakes the ring when the step barrier turns.
pub const WAKE_TAG: u64 = u64::MAX - 2;
/// `user_data` of cancellations (their own completions are ignored).
const CANCEL_TAG: u64 = u64::MAX - 3;
/// Added to a connection's tag in the completion of a `SEND_ZC`'s notification (the kernel
/// let go of the buffer): `NOTIF_TAG | conn`, its result the notification's (see
/// [`ZC_COPIED`]).
pub const NOTIF_TAG: u64 = 1 << 40;
/// Added to a connection's tag in the completion of its answer watch ([`Ring::watch_answer`]):
/// `WATCH_TAG | conn`.
pub const WATCH_TAG: u64 = 1 << 41;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: set in a notification's result when the kernel copied the
/// bytes after all (loopback always does).
pub const ZC_COPIED: i32 = i32::MIN;
/// `IORING_SEND_ZC_REPORT_USAGE`: ask notifications to say whether the kernel copied.
const SEND_ZC_REPORT_USAGE: u16 = 8;
/// How long a dropped ring waits for the kernel to give back cancelled operations.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// A socket address in the layout `connect(2)` takes.
#[derive(Debug, Clone, Copy)]
enum SockAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl SockAddr {
    fn new(addr: &SocketAddr) -> SockAddr {
        match addr {
            SocketAddr::V4(a) => SockAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => SockAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    fn as_ptr(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            SockAddr::V4(a) => (
                (a as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            SockAddr::V6(a) => (
                (a as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
        }
    }
}

/// The memory of one connection's operations.
#[derive(Debug)]
struct ConnIo {
    /// The request head being sent.
    request: Vec<u8>,
    /// Response heads and error documents.
    scratch: Box<[u8]>,
    /// TLS ciphertext as received, each record decrypted toward the front, over the gaps of
    /// the records before it (empty without TLS).
    stage: Box<[u8]>,
    /// The address a connect in flight points to.
    addr: Option<Box<SockAddr>>,
    /// The pool buffer a `READ_FIXED` in flight writes into.
    filling: Option<BufIndex>,
    /// The pool buffer a send in flight reads from.
    sending: Option<BufIndex>,
    /// The buffers of this connection's `SEND_ZC`s whose notification has not come, in order.
    zc_notifs: Vec<(BufIndex, Instant)>,
    /// An operation of this connection is in flight.
    pending: bool,
    /// Its answer watch is in flight (beside the operation: see [`Ring::watch_answer`]).
    watching: bool,
}

/// One completion: whose, and its result (bytes, or `-errno`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub result: i32,
}

/// A rank's ring with its registered pool and per-connection buffers.
///
/// The pool is registered with the kernel for the ring's whole life, so nothing outside this
/// file can reach it: the engine takes and gives back buffers by index ([`Ring::take_buffer`],
/// [`Ring::give_buffer`]) and reads the pool's sizes, and can neither replace the pool nor drop
/// it early. This compiles:
///
/// ```no_run
/// fn reuse(ring: &mut ringload::engine::uring::ring::Ring) {
///     if let Some(buf) = ring.take_buffer() {
///         ring.give_buffer(buf);
///     }
/// }
/// ```
///
/// and swapping the registered pool for another does not:
///
/// ```compile_fail
/// fn swap(
///     ring: &mut ringload::engine::uring::ring::Ring,
///     other: ringload::engine::pool::BufferPool,
/// ) {
///     *ring.pool_mut() = other;
/// }
/// ```
///
/// Drop order (see `Drop`): every operation is cancelled and reaped, the buffers are
/// unregistered, the ring is closed, and only then is the memory its operations pointed into
/// freed; the fields are `ManuallyDrop` so that order is the code's, not the declaration's.
pub struct Ring {
    ring: ManuallyDrop<IoUring>,
    pool: ManuallyDrop<BufferPool>,
    conns: ManuallyDrop<Vec<ConnIo>>,
    compute_timespec: ManuallyDrop<Box<Timespec>>,
    wake_counter: ManuallyDrop<Box<u64>>,
    /// Operations submitted or queued whose completion has not been reaped (a `SEND_ZC`
    /// counts until its notification).
    in_flight: usize,
    /// `sends[buf]`: sends from pool buffer `buf` the kernel may still read (a `SEND_ZC`'s
    /// until its notification).
    sends: Vec<u32>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("connections", &self.conns.len())
            .field("pool", &*self.pool)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

/// Creates a ring the way the engine does, to see whether this kernel and process allow it.
pub fn probe() -> io::Result<()> {
    let ring = build(8)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        (opcode::ReadFixed::CODE, "READ_FIXED"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::Connect::CODE, "CONNECT"),
        (opcode::Timeout::CODE, "TIMEOUT"),
        (opcode::Read::CODE, "READ"),
        (opcode::AsyncCancel2::CODE, "ASYNC_CANCEL"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the kernel's io_uring lacks {name}"),
            ));
        }
    }
    // A registered buffer is pinned and counted against RLIMIT_MEMLOCK: try one page.
    let pool = BufferPool::new(1, 4096)?;
    // SAFETY: the pool outlives the ring (dropped after it, below).
    unsafe { ring.submitter().register_buffers(&pool.iovecs()) }?;
    drop(ring);
    drop(pool);
    Ok(())
}

/// Sends a few bytes with `SEND_ZC` and the usage-report flag on a loopback TCP pair, as the
/// checkpoint writer sends its parts: `Err` with the kernel's answer when it refuses (Linux 6.0
/// and 6.1 without the backport answer `EINVAL` to the flag), or when its notification does not
/// come within a second.
pub fn probe_send_zc() -> io::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    let (mut server, _) = listener.accept()?;
    let mut ring = build(4)?;
    // Leaked if the kernel keeps it past the wait below: it must not be freed under a send.
    let data = ManuallyDrop::new(vec![0x5au8; 64]);
    let entry = opcode::SendZc::new(Fd(client.as_raw_fd()), data.as_ptr(), data.len() as u32)
        .zc_flags(SEND_ZC_REPORT_USAGE)
        .build()
        .user_data(1);
    // SAFETY: `data` outlives the operation: it is freed only once the notification said the
    // kernel let go of it, and leaked otherwise.
    unsafe { ring.submission().push(&entry) }
        .map_err(|_| io::Error::other("the probe's submission queue is full"))?;
    let deadline = Instant::now() + Duration::from_secs(1);
    let (mut sent, mut notified) = (None, false);
    let mut sink = [0u8; 64];
    while sent.is_none() || !notified {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no SEND_ZC notification within a second",
            ));
        }
        let ts = Timespec::from(wait.min(Duration::from_millis(50)));
        match ring
            .submitter()
            .submit_with_args(1, &SubmitArgs::new().timespec(&ts))
        {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) => return Err(e),
        }
        for cqe in ring.completion() {
            if io_uring::cqueue::notif(cqe.flags()) {
                notified = true;
            } else if cqe.result() < 0 {
                // A refused send has no notification to wait for: `data` can go.
                drop(ManuallyDrop::into_inner(data));
                return Err(io::Error::from_raw_os_error(-cqe.result()));
            } else {
                sent = Some(cqe.result());
                notified |= !io_uring::cqueue::more(cqe.flags());
            }
        }
        // The bytes read on the other end, so the kernel lets go of them.
        server.set_nonblocking(true)?;
        let _ = std::io::Read::read(&mut server, &mut sink);
    }
    drop(ManuallyDrop::into_inner(data));
    Ok(())
}

fn build(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_submit_all()
        .build(entries)
}

impl Ring {
    /// A ring for `connections` connections (one operation each, plus the timer and the wake
    /// read), with `pool` registered, a `scratch_bytes` scratch buffer and a `stage_bytes` TLS
    /// staging area per connection.
    pub fn new(
        connections: usize,
        scratch_bytes: usize,
        stage_bytes: usize,
        pool: BufferPool,
    ) -> io::Result<Ring> {
        let entries = (connections + 8).next_power_of_two().max(8) as u32;
        let ring = build(entries)?;
        // SAFETY: the pool's buffers stay mapped while the kernel can write into them: the ring
        // owns the pool, which nothing outside this file can reach (so it cannot be replaced or
        // dropped early), and `Drop` unregisters the buffers and closes the ring before it
        // unmaps the pool (and leaks it if operations could not be reaped).
        unsafe { ring.submitter().register_buffers(&pool.iovecs()) }.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("registering the buffer pool with the ring: {e}"),
            )
        })?;
        let conns = (0..connections)
            .map(|_| ConnIo {
                request: Vec::with_capacity(4096),
                scratch: vec![0u8; scratch_bytes].into_boxed_slice(),
                stage: vec![0u8; stage_bytes].into_boxed_slice(),
                addr: None,
                filling: None,
                sending: None,
                zc_notifs: Vec::with_capacity(4),
                pending: false,
                watching: false,
            })
            .collect();
        let sends = vec![0; pool.count()];
        Ok(Ring {
            ring: ManuallyDrop::new(ring),
            pool: ManuallyDrop::new(pool),
            conns: ManuallyDrop::new(conns),
            compute_timespec: ManuallyDrop::new(Box::new(Timespec::new())),
            wake_counter: ManuallyDrop::new(Box::new(0)),
            in_flight: 0,
            sends,
        })
    }

    /// Whether this kernel's io_uring has `IORING_OP_SEND_ZC` (Linux 6.0).
    pub fn supports_send_zc(&self) -> bool {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe).is_ok()
            && probe.is_supported(opcode::SendZc::CODE)
    }

    /// How long the oldest `SEND_ZC` notification still awaited has been (its send completed
    /// and the kernel still holds the buffer); `None` when none is awaited.
    pub fn oldest_notification_wait(&self) -> Option<Duration> {
        self.conns
            .iter()
            .filter_map(|io| io.zc_notifs.first().map(|(_, since)| since.elapsed()))
            .max()
    }

    /// Whether the kernel may still read pool buffer `buf` (a send, or a `SEND_ZC` whose
    /// notification has not come): until then its bytes must not change.
    pub fn buffer_sending(&self, buf: BufIndex) -> bool {
        self.sends[usize::from(buf.0)] > 0
    }

    /// Panics if the kernel may be reading or writing pool buffer `buf`.
    fn assert_untouched(&self, buf: BufIndex) {
        assert!(
            self.conns.iter().all(|io| io.filling != Some(buf)),
            "buffer {} has a read in flight",
            buf.0
        );
        assert!(
            !self.buffer_sending(buf),
            "buffer {} has a send in flight",
            buf.0
        );
    }

    /// A free pool buffer, or `None` when all are out (which the reader window makes
    /// impossible).
    pub fn take_buffer(&mut self) -> Option<BufIndex> {
        self.pool.take()
    }

    /// A free pool buffer of size class `class` (see [`BufferPool::with_classes`]).
    pub fn take_buffer_of(&mut self, class: usize) -> Option<BufIndex> {
        self.pool.take_class(class)
    }

    /// Returns pool buffer `buf`. Giving back one that is free already is a bug, caught by the
    /// pool.
    pub fn give_buffer(&mut self, buf: BufIndex) {
        self.pool.give(buf);
    }

    /// The size of the pool's largest buffers.
    pub fn largest_buffer(&self) -> usize {
        self.pool.largest_buffer()
    }

    /// The size of pool buffer `buf`.
    pub fn buffer_len(&self, buf: BufIndex) -> usize {
        self.pool.buffer_len(buf)
    }

    /// The pool's buffers, and how many of them are free.
    pub fn buffers(&self) -> (usize, usize) {
        (self.pool.count(), self.pool.free_count())
    }

    fn idle(&mut self, conn: usize) -> &mut ConnIo {
        let io = &mut self.conns[conn];
        assert!(
            !io.pending,
            "connection {conn} already has an operation in flight"
        );
        io
    }

    /// The buffer a request head is formatted into, while nothing of `conn` is in flight.
    pub fn request_buffer(&mut self, conn: usize) -> &mut Vec<u8> {
        &mut self.idle(conn).request
    }

    /// What the last receive of `conn` left in its scratch buffer.
    pub fn scratch(&self, conn: usize) -> &[u8] {
        let io = &self.conns[conn];
        assert!(!io.pending, "connection {conn} has a receive in flight");
        &io.scratch
    }

    /// `conn`'s scratch buffer and TLS staging area, to move decrypted bytes between them,
    /// while nothing of `conn` is in flight.
    pub fn scratch_and_stage(&mut self, conn: usize) -> (&mut [u8], &mut [u8]) {
        let io = self.idle(conn);
        (&mut io.scratch, &mut io.stage)
    }

    /// Copies `conn`'s staged plaintext `from` into pool buffer `buf` at `offset`: the TLS
    /// body's last copy. Panics if a read into `buf` is in flight.
    pub fn stage_into_buffer(
        &mut self,
        conn: usize,
        from: std::ops::Range<usize>,
        buf: BufIndex,
        offset: usize,
    ) {
        self.assert_untouched(buf);
        let io = &self.conns[conn];
        assert!(!io.pending, "connection {conn} has a receive in flight");
        let source = &io.stage[from];
        assert!(offset + source.len() <= self.pool.buffer_len(buf));
        // SAFETY: inside buffer `buf` (asserted); no kernel write into it is in flight
        // (asserted) nor can start while this runs (`&mut self`); the source is the
        // connection's own staging area, which is not in the pool.
        unsafe {
            std::ptr::copy_nonoverlapping(
                source.as_ptr(),
                self.pool.ptr(buf).add(offset),
                source.len(),
            );
        }
    }

    pub fn scratch_len(&self, conn: usize) -> usize {
        self.conns[conn].scratch.len()
    }

    /// The length of the request head last formatted for `conn`.
    pub fn request_len(&self, conn: usize) -> usize {
        self.conns[conn].request.len()
    }

    /// The first `len` bytes of pool buffer `buf`, as the kernel wrote them. Panics if a read
    /// into `buf` is in flight: then the kernel may still be writing it.
    pub fn filled(&self, buf: BufIndex, len: usize) -> &[u8] {
        self.assert_untouched(buf);
        // SAFETY: every kernel write into the pool is a READ_FIXED queued by this ring, and
        // none into `buf` is in flight (asserted). No new one can be queued while the slice
        // lives: queueing takes `&mut self`.
        unsafe { self.pool.bytes(buf, len) }
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry built by this file points into memory `self` owns and keeps
        // until the completion is reaped (see the module docs).
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.ring.submit()?;
        }
        self.in_flight += 1;
        Ok(())
    }

    fn push_conn(&mut self, conn: usize, entry: squeue::Entry) -> io::Result<()> {
        self.idle(conn).pending = true;
        self.push(entry.user_data(conn as u64))
    }

    /// Connects `fd` to `addr`.
    pub fn connect(
        &mut self,
        conn: usize,
        fd: BorrowedFd<'_>,
        addr: &SocketAddr,
    ) -> io::Result<()> {
        let addr = Box::new(SockAddr::new(addr));
        let (ptr, len) = addr.as_ptr();
        self.idle(conn).addr = Some(addr);
        let entry = opcode::Connect::new(Fd(fd.as_raw_fd()), ptr, len).build();
        self.push_conn(conn, entry)
    }

    /// Sends `request[from..]`.
    pub fn send(&mut self, conn: usize, fd: BorrowedFd<'_>, from: usize) -> io::Result<()> {
        let io = self.idle(conn);
        assert!(from < io.request.len());
        let bytes = &io.request[from..];
        let entry = opcode::Send::new(Fd(fd.as_raw_fd()), bytes.as_ptr(), bytes.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build();
        self.push_conn(conn, entry)
    }

    /// Peeks at `conn`'s socket for an answer, into its scratch buffer, beside the operation in
    /// flight (a request body being sent; nothing else of the connection touches the scratch
    /// buffer meanwhile): the one operation a connection may have besides its own, so that an
    /// answer the server sends before it has read the body is seen. Its completion is tagged
    /// `WATCH_TAG | conn` ([`watched`]).
    pub fn watch_answer(&mut self, conn: usize, fd: BorrowedFd<'_>) -> io::Result<()> {
        let io = &mut self.conns[conn];
        assert!(
            !io.watching,
            "connection {conn} already watches for an answer"
        );
        let (ptr, len) = (io.scratch.as_mut_ptr(), io.scratch.len());
        io.watching = true;
        let entry = opcode::Recv::new(Fd(fd.as_raw_fd()), ptr, len as u32)
            .flags(libc::MSG_PEEK)
            .build()
            .user_data(WATCH_TAG | conn as u64);
        self.push(entry)
    }

    /// Whether `conn`'s answer watch is in flight.
    pub fn watching(&self, conn: usize) -> bool {
        self.conns[conn].watching
    }

    /// Receives into `scratch[at..at + len]`; with `peek`, leaves the bytes in the socket.
    pub fn recv(
        &mut self,
        conn: usize,
        fd: BorrowedFd<'_>,
        at: usize,
        len: usize,
        peek: bool,
    ) -> io::Result<()> {
        let io = self.idle(conn);
        assert!(len > 0 && at + len <= io.scratch.len());
        let ptr = io.scratch[at..].as_mut_ptr();
        let flags = if peek { libc::MSG_PEEK } else { 0 };
        let entry = opcode::Recv::new(Fd(fd.as_raw_fd()), ptr, len as u32)
            .flags(flags)
            .build();
        self.push_conn(conn, entry)
    }

    /// Copies pool buffer `buf`'s bytes `from` to the start of `conn`'s staging area: TLS bytes
    /// that followed a body landed in place. Panics if a read into `buf` is in flight.
    pub fn buffer_into_stage(&mut self, conn: usize, buf: BufIndex, from: std::ops::Range<usize>) {
        let len = from.len();
        let source = self.buffer_from_mut(buf, from.start)[..len].as_ptr();
        let io = self.idle(conn);
        assert!(len <= io.stage.len());
        // SAFETY: `source` is `len` bytes inside buffer `buf` with no read in flight (checked
        // by `buffer_from_mut`); the staging area is the connection's own memory, apart from
        // the pool.
        unsafe { std::ptr::copy_nonoverlapping(source, io.stage.as_mut_ptr(), len) };
    }

    /// Pool buffer `buf` from byte `from` to its end, to decrypt TLS records there. Panics
    /// if a read into `buf` is in flight.
    pub fn buffer_from_mut(&mut self, buf: BufIndex, from: usize) -> &mut [u8] {
        self.assert_untouched(buf);
        let len = self.pool.buffer_len(buf);
        assert!(from <= len);
        // SAFETY: inside buffer `buf`; no kernel write into it is in flight (asserted) nor can
        // one start while the slice lives (queueing takes `&mut self`).
        unsafe { std::slice::from_raw_parts_mut(self.pool.ptr(buf).add(from), len - from) }
    }

    /// Receives TLS ciphertext into `stage[at..at + len]`.
    pub fn recv_stage(
        &mut self,
        conn: usize,
        fd: BorrowedFd<'_>,
        at: usize,
        len: usize,
    ) -> io::Result<()> {
        let io = self.idle(conn);
        assert!(len > 0 && at + len <= io.stage.len());
        let ptr = io.stage[at..].as_mut_ptr();
        let entry = opcode::Recv::new(Fd(fd.as_raw_fd()), ptr, len as u32).build();
        self.push_conn(conn, entry)
    }

    /// Reads up to `len` bytes from the socket into registered buffer `buf` at `offset`: the
    /// kernel copies them straight from the socket into the pool.
    pub fn read_fixed(
        &mut self,
        conn: usize,
        fd: BorrowedFd<'_>,
        buf: BufIndex,
        offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let buffer_bytes = self.pool.buffer_len(buf);
        assert!(len > 0 && offset + len <= buffer_bytes && len <= u32::MAX as usize);
        assert!(
            !self.buffer_sending(buf),
            "buffer {} has a send in flight",
            buf.0
        );
        // SAFETY: `offset + len <= buffer_bytes`, inside buffer `buf` of the registered pool.
        let ptr = unsafe { self.pool.ptr(buf).add(offset) };
        let entry = opcode::ReadFixed::new(Fd(fd.as_raw_fd()), ptr, len as u32, buf.0).build();
        self.push_conn(conn, entry)?;
        self.conns[conn].filling = Some(buf);
        Ok(())
    }

    /// Sends pool buffer `buf`'s bytes `offset..offset + len`: with `zc`, `SEND_ZC` from the
    /// registered buffer (the NIC reads the pages; a second completion, tagged
    /// [`NOTIF_TAG`], says when the kernel lets go of them), else `SEND` (the kernel copies
    /// them into the socket), both with `MSG_WAITALL` (the kernel sends all `len` bytes, as
    /// the socket drains, before the completion). The buffer's bytes must not change until
    /// [`Ring::buffer_sending`] is false, which [`Ring::buffer_from_mut`] asserts.
    pub fn send_buffer(
        &mut self,
        conn: usize,
        fd: BorrowedFd<'_>,
        buf: BufIndex,
        offset: usize,
        len: usize,
        zc: bool,
    ) -> io::Result<()> {
        let buffer_bytes = self.pool.buffer_len(buf);
        assert!(len > 0 && offset + len <= buffer_bytes && len <= u32::MAX as usize);
        assert!(
            self.conns.iter().all(|io| io.filling != Some(buf)),
            "buffer {} has a read in flight",
            buf.0
        );
        // SAFETY: `offset + len <= buffer_bytes`, inside buffer `buf` of the registered pool,
        // which outlives every operation (see the module docs); the kernel only reads it.
        let ptr = unsafe { self.pool.ptr(buf).add(offset) }.cast_const();
        let fd = Fd(fd.as_raw_fd());
        let entry = if zc {
            opcode::SendZc::new(fd, ptr, len as u32)
                .buf_index(Some(buf.0))
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .zc_flags(SEND_ZC_REPORT_USAGE)
                .build()
        } else {
            opcode::Send::new(fd, ptr, len as u32)
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .build()
        };
        self.push_conn(conn, entry)?;
        self.conns[conn].sending = Some(buf);
        self.sends[usize::from(buf.0)] += 1;
        Ok(())
    }

    /// Completes with [`COMPUTE_TAG`] after `duration`.
    pub fn timeout(&mut self, duration: Duration) -> io::Result<()> {
        **self.compute_timespec = Timespec::from(duration);
        let entry = opcode::Timeout::new(&**self.compute_timespec as *const Timespec)
            .build()
            .user_data(COMPUTE_TAG);
        self.push(entry)
    }

    /// Reads the eventfd `fd` (completes with [`WAKE_TAG`] when it is written).
    pub fn watch(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let ptr = (&mut **self.wake_counter as *mut u64).cast::<u8>();
        let entry = opcode::Read::new(Fd(fd.as_raw_fd()), ptr, 8)
            .build()
            .user_data(WAKE_TAG);
        self.push(entry)
    }

    /// Submits what is queued and waits until at least one completion is there or `wait` has
    /// passed (`None`: only reap what is ready). Replaces `out` with the completions, in the
    /// order reaped (`out` is the caller's, reused: no allocation once it has grown to the
    /// number of operations that can be in flight).
    pub fn wait(&mut self, wait: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        out.clear();
        let result = match wait {
            Some(d) if self.ring.completion().is_empty() => {
                let ts = Timespec::from(d.max(Duration::from_micros(1)));
                let args = SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            _ => self.ring.submitter().submit_and_wait(0),
        };
        match result {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        let mut completion = self.ring.completion();
        completion.sync();
        for cqe in completion {
            let (tag, result, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            if tag == CANCEL_TAG {
                continue;
            }
            if let Some(conn) = watched(tag) {
                self.in_flight -= 1;
                if let Some(io) = self.conns.get_mut(conn) {
                    io.watching = false;
                }
                out.push(Completion { tag, result });
                continue;
            }
            let io = self.conns.get_mut(tag as usize);
            if io_uring::cqueue::notif(flags) {
                // A SEND_ZC's second completion: the kernel let go of its buffer.
                self.in_flight -= 1;
                if let Some(io) = io
                    && !io.zc_notifs.is_empty()
                {
                    let (buf, _) = io.zc_notifs.remove(0);
                    self.sends[usize::from(buf.0)] -= 1;
                }
                out.push(Completion {
                    tag: NOTIF_TAG | tag,
                    result,
                });
                continue;
            }
            // With F_MORE a notification follows: the operation stays counted until then.
            let more = io_uring::cqueue::more(flags);
            if !more {
                self.in_flight -= 1;
            }
            if let Some(io) = io {
                io.pending = false;
                io.addr = None;
                io.filling = None;
                if let Some(buf) = io.sending.take() {
                    if more {
                        io.zc_notifs.push((buf, Instant::now()));
                    } else {
                        self.sends[usize::from(buf.0)] -= 1;
                    }
                }
            }
            out.push(Completion { tag, result });
        }
        Ok(())
    }

    /// Cancels every operation in flight and reaps them; true when none is left.
    fn drain(&mut self) -> bool {
        if self.in_flight == 0 {
            return true;
        }
        let cancel = opcode::AsyncCancel2::new(CancelBuilder::any())
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancellation points at no memory.
        if unsafe { self.ring.submission().push(&cancel) }.is_err() {
            return false;
        }
        let deadline = Instant::now() + DRAIN_LIMIT;
        let mut reaped = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            if self
                .wait(Some(Duration::from_millis(50)), &mut reaped)
                .is_err()
            {
                return false;
            }
        }
        self.in_flight == 0
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let drained = self.drain();
        if drained {
            // The kernel lets go of the pool's pages now.
            let _ = self.ring.submitter().unregister_buffers();
        }
        // SAFETY: `self.ring` is not used after this. Closed first: from here no operation can
        // be queued or submitted; closing it also unregisters the buffers if the call above
        // did not.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if drained {
            // SAFETY: nothing was in flight when the ring was closed, so the kernel holds no
            // pointer into these any more; each is dropped once, here.
            unsafe {
                ManuallyDrop::drop(&mut self.conns);
                ManuallyDrop::drop(&mut self.wake_counter);
                ManuallyDrop::drop(&mut self.compute_timespec);
                ManuallyDrop::drop(&mut self.pool);
            }
        }
        // Else operations the kernel did not give back may still write into that memory when
        // it finishes them: leak it rather than free it under them.
    }
}

/// Sets `TCP_QUICKACK`: an ACK the kernel holds back is sent now.
pub fn quickack(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}

/// Sets `SO_RCVLOWAT`: the socket reports readable (and a receive completes) only once `bytes`
/// are queued, so a large read is served in few large copies instead of many small ones.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, value)
}

/// The connection whose answer watch a completion tagged `tag` is, if it is one.
pub fn watched(tag: u64) -> Option<usize> {
    (tag & WATCH_TAG != 0 && tag & NOTIF_TAG == 0 && tag < CANCEL_TAG)
        .then_some((tag & !WATCH_TAG) as usize)
}

/// `setsockopt` of an `int` option.
fn set_int_option(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
