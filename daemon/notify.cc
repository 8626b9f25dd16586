#include "daemon/notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/logging.h"

namespace tierfs {
namespace {

// A STATUS= value is one line: newlines would start new assignments.
std::string OneLine(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

void Send(const std::string& state) {
  // sd_notify returns 0 when NOTIFY_SOCKET is unset, > 0 when sent, < 0 (-errno) on failure.
  int r = sd_notify(0, state.c_str());
  if (r < 0) {
    Logger(Module::kDaemon).warn("sd_notify to $NOTIFY_SOCKET failed: {}", std::strerror(-r));
  }
}

}  // namespace

void NotifyStatus(std::string_view status) { Send("STATUS=" + OneLine(status)); }

void NotifyReady(std::string_view status, int main_pid) {
  Send("READY=1\nSTATUS=" + OneLine(status) + "\nMAINPID=" + std::to_string(main_pid));
}

void NotifyMainPid(int pid) { Send("MAINPID=" + std::to_string(pid)); }

void NotifyStopping(std::string_view status) { Send("STOPPING=1\nSTATUS=" + OneLine(status)); }

}  // namespace tierfs
