//! Loading libfabric (on first use) leaves the process as it was: the constructors of its
//! Debian dependencies install signal handlers (libinfinipath's exits with status 1 on
//! SIGTERM), which must not replace the application's.

extern "C" fn on_term(_: libc::c_int) {}

#[test]
fn loading_libfabric_keeps_the_applications_signal_handlers() {
    let handler = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: installing a handler that does nothing, for signals this test never raises.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGSEGV] {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler;
            assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
        }
    }
    let offers = fabric::discover().expect("libfabric loads and answers");
    assert!(!offers.is_empty());
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGSEGV] {
        // SAFETY: reading the current disposition into a zeroed struct.
        let now = unsafe {
            let mut now: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut now), 0);
            now
        };
        assert_eq!(now.sa_sigaction, handler, "signal {sig} lost its handler");
    }
}
