// machine.h: the state of the fake GPUs that the driver keeps for every
// process on the machine, shared by the fake driver (fakecuda.c, which
// charges each process's device memory to it) and the fake NVML
// (testdata/fakenvml, which reads it). On a real machine this state lives
// in the kernel driver: every process's cuMemGetInfo sees the memory of all
// of them, and NVML lists each process with the memory the driver
// attributes to it. RULES.md says where NVIDIA documents each rule.
//
// With FAKECUDA_MACHINE=path the state is a file-backed shared mapping of
// that file, so that every process started with the same path (and the
// same FAKECUDA_DEVICES and FAKECUDA_CAPACITY) shares one set of fake
// GPUs. Without it, the state is the process's own: a machine with one
// process on it.
#ifndef MEMTRACK_FAKECUDA_MACHINE_H
#define MEMTRACK_FAKECUDA_MACHINE_H

#include <pthread.h>

#define MACHINE_DEVICES 16
#define MACHINE_PROCS 64
#define MACHINE_MAGIC 0x6d656d74u // "memt"
#define MACHINE_VERSION 1u

// machine_proc is one process on the machine, as the driver knows it.
struct machine_proc {
	int pid;                                    // 0: a free slot
	int contexts[MACHINE_DEVICES];              // its contexts alive on each device
	unsigned long long used[MACHINE_DEVICES];   // the device memory the driver attributes to it
};

struct machine {
	unsigned magic, version;
	pthread_mutex_t mu; // process-shared and robust: held while a figure changes or is read
	struct machine_proc procs[MACHINE_PROCS];
};

// The fake driver's accessors, which the fake NVML finds with dlsym in the
// driver loaded (dlopen of libcuda.so.1 with RTLD_NOLOAD, however the
// process loaded it): NVML talks to the driver of the machine, and a process
// without the driver loaded gets NVML_ERROR_DRIVER_NOT_LOADED.
//
//	fakecuda_machine       the machine, configured on the first call
//	fakecuda_machine_lock  locks it, reaping the processes that exited
//	fakecuda_machine_unlock
//	fakecuda_devices       FAKECUDA_DEVICES
//	fakecuda_capacity      FAKECUDA_CAPACITY of a device
//	fakecuda_identity      a device's name and the 16 bytes of its UUID
typedef struct machine *(*fakecuda_machine_fn)(void);
typedef void (*fakecuda_machine_lock_fn)(void);
typedef int (*fakecuda_devices_fn)(void);
typedef unsigned long long (*fakecuda_capacity_fn)(int dev);
typedef void (*fakecuda_identity_fn)(int dev, char *name, int len, unsigned char uuid[16]);

#endif
