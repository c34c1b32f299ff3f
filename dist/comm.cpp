#include "dist/comm.h"

#include <string>
#include <thread>

#include "common/error.h"
#include "dist/runtime.h"

namespace k3::dist {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw InternalError(std::string(what) + " failed: " + std::string(text, len));
}

void require_main_thread(const char* what) {
  if (std::this_thread::get_id() != Runtime::main_thread_id()) {
    throw InternalError(std::string(what) +
                        " called off the main thread; the job's MPI calls are funneled through it");
  }
}

Comm::Comm(MPI_Comm comm) : comm_(comm) {
  if (comm_ != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
}

Comm::~Comm() { release(); }

Comm::Comm(Comm&& other) noexcept
    : comm_(other.comm_), rank_(other.rank_), size_(other.size_), name_(other.name_) {
  other.comm_ = MPI_COMM_NULL;
}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = other.comm_;
    rank_ = other.rank_;
    size_ = other.size_;
    name_ = other.name_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

Comm Comm::world() {
  Comm world(MPI_COMM_WORLD);
  world.set_name("world");
  return world;
}

Comm Comm::split(int color, int key) const {
  require_main_thread("MPI_Comm_split");
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
  return Comm(out);
}

void Comm::release() noexcept {
  if (comm_ == MPI_COMM_NULL || comm_ == MPI_COMM_WORLD || comm_ == MPI_COMM_SELF) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

}  // namespace k3::dist
