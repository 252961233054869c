// Package claims is a board of claims on devices, kept as files in one
// directory that every process on a machine reads: a process that is about
// to take memory on a device announces how much ([Board.Post]), the others
// read the claims on that device ([Board.Read]) and count them as memory
// in use before it is, and the claimant withdraws its claim once its load
// is done ([Posted.Withdraw]). A claim is not memory: nothing is reserved,
// and a process that announces nothing is not stopped.
//
// # Why files
//
// The processes that share a GPU may belong to different users and run in
// different containers, each with its PID namespace, its IPC namespace and
// its network namespace. A directory is what all of them can share: a
// path on the host, bind-mounted into each container, created with the
// sticky bit and writable by all (mode 1777, as /tmp is), so that any user
// may post a claim and only its owner may replace or remove it. POSIX
// shared memory lives in /dev/shm, which each container has apart unless
// it is given the host's IPC namespace; a socket needs a process that
// serves it and outlives the others, and an abstract socket is per network
// namespace. A file needs neither: it is written whole to a temporary file
// and renamed into place ([os.Rename] is atomic within a directory), so a
// reader sees a claim complete or not at all, and a claim survives no one
// but its expiry.
//
// # A claim's life
//
// A claim holds its device's key (a GPU's UUID, which names the same GPU
// in every container whatever CUDA_VISIBLE_DEVICES renumbers), its bytes,
// the claimant's memory on the device when it claimed (Base), its owner
// (the host's name, the PID namespace, the PID and the process's start
// time) and when it was made and expires. It is live until its expiry,
// which its owner pushes back ([Posted.Renew]) while it waits, and until
// it is withdrawn. A process that dies leaves a file behind: a reader
// skips a claim past its expiry, and, on Linux, one whose owner is on its
// own host and in its own PID namespace but no longer runs (its PID gone,
// or taken by a process started at another time), which it finds in
// /proc; it removes what it skips where the directory lets it (the
// sticky bit lets only the owner's user remove a file).
//
// # What a claim counts for
//
// A claim counts for what its owner has not taken yet: where a reader
// sees the owner's memory on the device as the driver accounts it (NVML
// lists the PID in the reader's own PID namespace), it counts the claim's
// bytes less the owner's growth since Base ([Effective]), so that memory
// moving from the claim into use is never counted twice.
//
// The board trusts its directory: anyone who may write to it may post a
// claim. Give the directory to a group, not to all, where that matters.
package claims
