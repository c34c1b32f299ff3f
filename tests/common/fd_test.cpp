#include "common/fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <utility>

namespace k3 {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesOnceWhateverEndsItsOwnership) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd a(raw);
    EXPECT_TRUE(a);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_EQ(b.get(), raw);
    UniqueFd c;
    c = std::move(b);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));

  raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  UniqueFd d(raw);
  EXPECT_EQ(d.close(), 0);
  EXPECT_FALSE(d);
  EXPECT_FALSE(is_open(raw));
  EXPECT_EQ(d.close(), 0);  // a second close is a no-op

  raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  UniqueFd e(raw);
  const int released = e.release();
  EXPECT_FALSE(e);
  EXPECT_TRUE(is_open(released));
  UniqueFd f(released);
  f.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(is_open(released));
}

}  // namespace
}  // namespace k3
