// faults.h: the fault injection of the fake driver (FAKECUDA_FAIL) and the
// fake NVML (FAKENVML_FAIL): "f:n:code[,...]" makes the n-th call of the
// process to the function f fail with the result code.
#ifndef MEMTRACK_FAKECUDA_FAULTS_H
#define MEMTRACK_FAKECUDA_FAULTS_H

#include <stdlib.h>
#include <string.h>

#define MAX_FAULTS 16

struct fault {
	char name[64];
	long n;
	int code;
	long calls;
};

// parse_faults reads s into faults, at most MAX_FAULTS, and returns how
// many it read; it stops at the first entry it cannot read.
static int parse_faults(const char *s, struct fault faults[MAX_FAULTS]) {
	int n = 0;
	while (s && *s && n < MAX_FAULTS) {
		struct fault *f = &faults[n];
		const char *colon = strchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof f->name) break;
		memcpy(f->name, s, (size_t)(colon - s));
		f->name[colon - s] = 0;
		char *end;
		f->n = strtol(colon + 1, &end, 0);
		if (*end != ':') break;
		f->code = (int)strtol(end + 1, &end, 0);
		n++;
		s = *end == ',' ? end + 1 : NULL;
	}
	return n;
}

#endif
