// systemd service notifications (sd_notify(3) from libsystemd) for `tierfs mount` run by a unit
// with Type=notify (packaging/tierfs@.service): READY=1 once the mount is in place (the same
// point at which a daemonized mount's parent is told "OK"), STOPPING=1 once the FUSE loop ended,
// and STATUS= lines on the way. Every call is a no-op when NOTIFY_SOCKET is unset (not run by
// systemd, or another service type), so nothing changes outside systemd.
//
// Thread-safety: safe from any thread (each call is one datagram); the daemon calls them from its
// main thread.
#pragma once

#include <string_view>

namespace tierfs {

// STATUS=<status>: a free-form line `systemctl status` shows.
void NotifyStatus(std::string_view status);

// READY=1, STATUS=<status> and MAINPID=<main_pid> (the unit's main process: the serving daemon,
// or its supervisor; the unit has NotifyAccess=all so that either may send it).
void NotifyReady(std::string_view status, int main_pid);

// MAINPID=<pid>: the daemon that took the mount over (a live restart) is the unit's main
// process from now on.
void NotifyMainPid(int pid);

// STOPPING=1 and STATUS=<status>.
void NotifyStopping(std::string_view status);

}  // namespace tierfs
