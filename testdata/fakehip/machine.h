// machine.h: the state of the fake AMD GPUs that the kernel driver keeps
// for every process on the machine, shared by the fake HIP runtime
// (fakehip.c, which charges each process's device memory to it) and the
// fake SMI library (testdata/fakesmi, which reads it, as rocm_smi reads
// the kernel's per-process figures). On a real machine this state lives in
// the kernel (KFD): every process's hipMemGetInfo sees the memory of all of
// them, and rocm_smi lists each process with the memory the kernel
// attributes to it. RULES.md says where AMD documents each rule.
//
// With FAKEHIP_MACHINE=path the state is a file-backed shared mapping of
// that file, so that every process started with the same path (and the
// same FAKEHIP_DEVICES and FAKEHIP_CAPACITY) shares one set of fake GPUs.
// Without it, the state is the process's own: a machine with one process
// on it, which the fake SMI library finds in the fake runtime the process
// loaded (fakehip_machine, found with dlsym).
//
// The devices themselves (how many, their PCI addresses and capacities) are
// configured by the environment, read by both fakes with machine_config,
// as both a real runtime and a real SMI library find the same GPUs.
#ifndef MEMTRACK_FAKEHIP_MACHINE_H
#define MEMTRACK_FAKEHIP_MACHINE_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MACHINE_DEVICES 16
#define MACHINE_PROCS 64
#define MACHINE_MAGIC 0x68697066u // "hipf"
#define MACHINE_VERSION 1u
#define MACHINE_PASID_BASE 0x8000u

// machine_proc is one process on the machine, as the kernel knows it.
struct machine_proc {
	int pid;                                  // 0: a free slot
	int kfd;                                  // its runtime initialised: the kernel lists it as a compute process
	int queues[MACHINE_DEVICES];              // it created a queue (a stream) on the device
	unsigned long long used[MACHINE_DEVICES]; // the device memory the kernel attributes to it
};

struct machine {
	unsigned magic, version;
	pthread_mutex_t mu; // process-shared and robust: held while a figure changes or is read
	struct machine_proc procs[MACHINE_PROCS];
};

// machine_devices is the machine's GPUs as both fakes see them.
struct machine_devices {
	int n;                                        // FAKEHIP_DEVICES (default 1; 0: no GPU)
	unsigned long long capacity[MACHINE_DEVICES]; // FAKEHIP_CAPACITY (default 4 GiB, the last repeats)
	unsigned domain[MACHINE_DEVICES], bus[MACHINE_DEVICES], dev[MACHINE_DEVICES], fn[MACHINE_DEVICES];
};

// machine_config reads the devices from the environment. Device i sits at
// PCI address 0000:(FAKEHIP_PCI_BUS + i):00.0, FAKEHIP_PCI_BUS being 0xc1 by
// default.
static inline void machine_config(struct machine_devices *d) {
	memset(d, 0, sizeof *d);
	const char *s = getenv("FAKEHIP_DEVICES");
	d->n = s && *s ? atoi(s) : 1;
	if (d->n < 0) d->n = 0;
	if (d->n > MACHINE_DEVICES) d->n = MACHINE_DEVICES;
	unsigned long long c = 4ull << 30;
	s = getenv("FAKEHIP_CAPACITY");
	const char *b = getenv("FAKEHIP_PCI_BUS");
	unsigned bus = b && *b ? (unsigned)strtoul(b, NULL, 0) : 0xc1;
	for (int i = 0; i < MACHINE_DEVICES; i++) {
		if (s && *s) {
			char *end;
			c = strtoull(s, &end, 0);
			s = *end == ',' ? end + 1 : NULL;
		}
		d->capacity[i] = c;
		d->bus[i] = (bus + (unsigned)i) & 0xff;
	}
}

// machine_lock_slot is the byte of the machine's file whose record lock
// the process of slot i holds while it lives: the kernel releases it when
// the process exits, however it exits, as the kernel frees an exited
// process's memory.
static inline off_t machine_lock_slot(int i) { return (off_t)sizeof(struct machine) + i; }

// machine_reap frees the slots of processes that exited; m->mu is held. fd
// is the machine's file, or -1 for a machine of the process's own; self,
// the caller's slot or NULL, is not asked, nor is any slot of the calling
// process (its record locks, on whichever descriptor, are its own, which
// F_GETLK does not report).
static inline void machine_reap(struct machine *m, int fd, const struct machine_proc *self) {
	if (fd < 0) return;
	int me = (int)getpid();
	for (int i = 0; i < MACHINE_PROCS; i++) {
		struct machine_proc *p = &m->procs[i];
		if (p->pid == 0 || p == self || p->pid == me) continue;
		struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = machine_lock_slot(i), .l_len = 1};
		if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK) memset(p, 0, sizeof *p);
	}
}

static inline void machine_lock(struct machine *m, int fd, const struct machine_proc *self) {
	if (pthread_mutex_lock(&m->mu) == EOWNERDEAD) pthread_mutex_consistent(&m->mu);
	machine_reap(m, fd, self);
}

static inline void machine_unlock(struct machine *m) { pthread_mutex_unlock(&m->mu); }

// machine_map maps the machine: the file path (created where missing), or,
// for NULL, memory of the process's own. It returns the mapping, or NULL
// with errno and *what saying what failed; *fd is the file, kept open, or
// -1.
static inline struct machine *machine_map(const char *path, int *fd, const char **what) {
	void *p;
	*fd = -1;
	if (path && *path) {
		*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (*fd < 0) return *what = "open", NULL;
		if (flock(*fd, LOCK_EX) != 0) return *what = "flock", NULL;
		struct stat st;
		if (fstat(*fd, &st) != 0) return *what = "fstat", NULL;
		if ((size_t)st.st_size < sizeof(struct machine) && ftruncate(*fd, sizeof(struct machine)) != 0) return *what = "ftruncate", NULL;
		p = mmap(NULL, sizeof(struct machine), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	} else {
		p = mmap(NULL, sizeof(struct machine), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED) return *what = "mmap", NULL;
	struct machine *m = p;
	if (m->magic != MACHINE_MAGIC) {
		pthread_mutexattr_t a;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		pthread_mutex_init(&m->mu, &a);
		pthread_mutexattr_destroy(&a);
		m->version = MACHINE_VERSION;
		__atomic_store_n(&m->magic, MACHINE_MAGIC, __ATOMIC_RELEASE);
	} else if (m->version != MACHINE_VERSION) {
		errno = EINVAL;
		return *what = "written by another version of the fakes", NULL;
	}
	if (*fd >= 0) flock(*fd, LOCK_UN);
	return m;
}

// The fake runtime's accessors, which the fake SMI library finds with dlsym
// in the runtime loaded (dlopen with RTLD_NOLOAD) where the machine is the
// process's own:
//
//	fakehip_machine      the machine, configured on the first call
//	fakehip_machine_fd   its file, or -1
typedef struct machine *(*fakehip_machine_fn)(void);
typedef int (*fakehip_machine_fd_fn)(void);

#endif
