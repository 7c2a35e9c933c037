/* A wall clock the test steps: preloaded into a process (LD_PRELOAD), it adds an
 * offset in milliseconds, read from the file named by CLOCK_SHIM_FILE at every reading
 * (absent or unreadable: 0), to CLOCK_REALTIME as clock_gettime, gettimeofday and time
 * return it. Monotonic clocks are left alone, as an NTP step leaves them.
 *
 * Used by tests/it/fleet_clocks.rs to step a real redis-server's clock (its TIME)
 * forward under a crawl. It allocates nothing and calls no dynamic loader function:
 * Debian's redis-server is built with jemalloc, which a preload that does (faketime)
 * deadlocks. Built by the test with the system's cc. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms(void) {
  const char *path = getenv("CLOCK_SHIM_FILE");
  if (path == NULL) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[32];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  return strtoll(text, NULL, 10);
}

static int is_wall(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long r = syscall(SYS_clock_gettime, id, ts);
  if (r != 0 || !is_wall(id)) return (int)r;
  long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ms() * 1000000LL;
  ts->tv_sec = (time_t)(ns / 1000000000LL);
  ts->tv_nsec = (long)(ns % 1000000000LL);
  return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  if (tv != NULL) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != NULL) *out = ts.tv_sec;
  return ts.tv_sec;
}
