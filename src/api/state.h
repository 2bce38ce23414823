// What the public handles (tessera/runtime.h) share: the state behind
// Runtime, Model, Session and Event. Internal to src/api.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/daemon_link.h"
#include "compiler/program.h"
#include "devices/device.h"
#include "tessera/inspect.h"
#include "tessera/runtime.h"
#include "topology/host_map.h"

namespace tessera::detail {

// The local Runtime: one per process, whatever connect("local") is called
// how often, so that its sessions get disjoint cores.
// Runs a session finished, their compute time and wall time.
struct RunCounters {
  std::atomic<uint64_t> runs{0};
  std::atomic<int64_t> busy_ns{0}, wall_ns{0};
};

struct RuntimeState {
  std::string uri;
  std::mutex mu;
  std::vector<int> holders;  // per PU slot: sessions running vEUs there
  std::optional<HostMap> host_map;  // obtained at the first Plan (measured once, cached on disk)

  // Slots for a session: `wanted` vEUs (0: every free slot, at least one)
  // on the free slots first; where too few are free they are shared, and
  // *shared says so. Explicit `cores` are taken as given (checked).
  Result<std::vector<int>> acquire(int wanted, const std::vector<int>& cores, bool* shared);
  void release(const std::vector<int>& slots);
  // Appliance sessions' counts by lease, which the pings carry (guarded
  // by mu). Declared before `daemon`, whose heartbeat reads them.
  std::map<uint64_t, std::shared_ptr<struct RunCounters>> leased;
  // Connected to a daemon: its leases give the cores (acquire() is not
  // used), and end with the session or the connection.
  std::shared_ptr<DaemonLink> daemon;
  Result<std::vector<int>> lease(int wanted, uint64_t memory_bytes, const std::string& session, double latency_ms,
                                 uint64_t* id);
  // Admission by schedule: the lease's Plan predicted to take
  // `predicted_ms`, checked by the daemon against the lease's objective.
  Status admit(uint64_t id, double predicted_ms);
  void end_lease(uint64_t id);
  // This host's map, obtained once; `file` overrides (not cached here).
  Result<const HostMap*> map(const std::string& file, const CompileOptions& o, HostMap* scratch);
};

struct ModelState {
  std::shared_ptr<RuntimeState> runtime;
  std::string path;
  bool executable = false;
  CompileOptions options;
  std::vector<TensorInfo> inputs, outputs;
  std::string remote;  // a cloud daemon's name for it (its content hash); "" when local
};

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  NamedTensors outputs;
  std::vector<std::function<void(const Status&)>> callbacks;
  void finish(Status st, NamedTensors out);
};

// A session's requests, in turn: a ticket each; run() executes on its
// caller's thread when its turn comes, submit() on the session's worker.
// Shared by the session and its worker, so that the worker outlives the
// session when a callback drops the last handle on the worker's thread.
struct Turns {
  struct Request {
    uint64_t ticket;
    NamedTensors inputs;
    std::shared_ptr<EventState> event;
    int64_t made_ns;
  };
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_ticket = 0, serving = 0;  // guarded by mu
  std::deque<Request> queue;              // guarded by mu
  bool stopping = false;                  // guarded by mu: the session is gone
  uint64_t take();
  void await(uint64_t ticket);
  void end();
};

struct SessionState : std::enable_shared_from_this<SessionState> {
  std::shared_ptr<ModelState> model;
  std::shared_ptr<RuntimeState> runtime;
  SessionOptions options;
  std::string device;
  std::vector<int> slots;  // held in the Runtime (cpu)
  uint64_t lease = 0;      // a daemon's lease of those cores (0: none)
  uint64_t remote = 0;     // a cloud daemon's session (0: local); `loaded` is then empty
  // Its rings (src/daemon/ring.h), when registered: the mapping, and where
  // each input and output lies in the data area.
  void* ring = nullptr;
  size_t ring_bytes = 0;
  std::vector<uint64_t> ring_in, ring_out;
  std::shared_ptr<RunCounters> counters = std::make_shared<RunCounters>();  // a daemon's status
  std::vector<TensorInfo> inputs, outputs;
  CompileReport report;
  std::shared_ptr<Device> device_ptr;
  std::unique_ptr<LoadedProgram> loaded;
  int veus = 1;

  // Requests run one at a time, in the order they were made.
  std::shared_ptr<Turns> turns = std::make_shared<Turns>();
  std::thread worker;  // started by the first submit()

  // Guarded by the turn (only the request being served touches them).
  std::vector<Tensor> bound;                // per output: caller memory, or undefined
  std::vector<const void*> bound_inputs;    // per input: the caller memory bound last run
  std::vector<void*> bound_outputs;         // per output: the memory the device writes (nullptr: its own)
  RunBreakdown last;
  std::string trace_path;

  ~SessionState();
  // Runs one request (its turn held): copy in, compute, copy out into
  // `outputs` (an output already there is written into its memory; the
  // others are added).
  Status execute(const NamedTensors& inputs, double queue_ms, NamedTensors& outputs);
  Result<NamedTensors> execute(const NamedTensors& inputs, double queue_ms);
  // execute() for a cloud session: the daemon validates the request and
  // its worker runs it (daemon.cc).
  Status execute_remote(const NamedTensors& inputs, double queue_ms, NamedTensors& outputs);
  Status execute_ring(const NamedTensors& inputs, double queue_ms, NamedTensors& outputs);
  // Where output i goes: its Tensor in `out` where the caller gave one,
  // else added there (the memory bound with bind_output, or fresh).
  Tensor* output_into(size_t i, NamedTensors& out);
  // `last` for a run timed at t0 (copy in), t1 (compute), t2 (copy out)
  // and t3 (done), with the bytes copied each way; wait_ms is left to the
  // path that knows it.
  void record(int64_t t0, int64_t t1, int64_t t2, int64_t t3, double queue_ms, uint64_t in_bytes, uint64_t out_bytes);
  // The worker: serves submitted requests while the session lives; one
  // left when it has gone fails its Event.
  static void worker_main(std::shared_ptr<Turns> turns, std::weak_ptr<SessionState> session);
};

// A cloud daemon's Runtime: compiling sends the model to the daemon, and
// sessions run in its workers (daemon.cc).
Result<std::shared_ptr<ModelState>> compile_remote(const std::shared_ptr<RuntimeState>& rt, const std::string& path,
                                                   const CompileOptions& options);
Result<std::shared_ptr<SessionState>> open_remote(const std::shared_ptr<ModelState>& m, const SessionOptions& so);
void close_remote(SessionState& s);
Status setup_rings(SessionState& s);
bool is_cloud(const RuntimeState& rt);
Status not_in_cloud(const char* what);

// The compiler's configuration for a model's options (no Plan).
CompileConfig config_of(const CompileOptions& o);
// The Program a session with `so` would load: an Executable's, else
// compiled with a Plan for so.veus (0: every vEU of the device) on
// so.cores (else the first ones), without starting a session.
Result<std::unique_ptr<Program>> compile_plan(ModelState& m, const SessionOptions& so);
// The public views of a Program (inspect.cc).
PlanInfo plan_info(const Program& p);
CompileReport compile_report(const Program& p);

}  // namespace tessera::detail
