// dist::Comm: an owned MPI communicator (RAII) and the main-thread discipline of MPI calls.
#pragma once

#include <mpi.h>

namespace k3::dist {

// The job's MPI calls are FUNNELED: only the thread that initialised MPI makes them (MPI itself
// runs MPI_THREAD_MULTIPLE so that the watchdog thread, dist/watchdog.h, can talk on its own
// communicator). Every wrapper checks this, so a collective issued from a oneTBB task is an
// InternalError rather than a race.
void require_main_thread(const char* what);

class Comm {
 public:
  Comm() = default;
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD/SELF/NULL).
  explicit Comm(MPI_Comm comm);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;

  static Comm world();

  MPI_Comm handle() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool valid() const { return comm_ != MPI_COMM_NULL; }
  // What the communicator is for ("world", a GroupKind's name such as "attn-tp"): named in the
  // watchdog's messages about a collective over it. A string literal, never freed.
  const char* name() const { return name_; }
  void set_name(const char* name) { name_ = name; }

  // MPI_Comm_split: ranks with the same colour form one new communicator, ordered by `key`.
  Comm split(int color, int key) const;

 private:
  void release() noexcept;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  const char* name_ = "a communicator";
};

// Throws InternalError naming `what` when an MPI call does not return MPI_SUCCESS.
void check_mpi(int rc, const char* what);

}  // namespace k3::dist
