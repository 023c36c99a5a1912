/*
 * ncclsim stubs: the host/driver layer that NCCL's topology code normally talks to
 * (logging, NCCL_* parameters, sysfs, NVML, CUDA runtime, network-plugin device counts,
 * bootstrap all-gather, transports' canConnect).  Nothing here computes paths, graphs or
 * tuning: that is all NCCL's own code (src/graph/*.cc, enqueue.cc, transport/nvls.cc).
 *
 * The "machine" seen through these stubs is the one described by the topology XML file
 * (see machine.h): no sysfs, an NVML that only knows the GPUs of the XML, and a network
 * plugin that reports the NICs of the XML.
 */
#include "core.h"
#include "comm.h"
#include "graph.h"
#include "topo.h"
#include "transport.h"
#include "nvmlwrap.h"
#include "bootstrap.h"
#include "os.h"
#include "net.h"
#include <stdarg.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <stdio.h>
#include <mutex>
#include <condition_variable>
#include <vector>
#include "machine.h"
#include "xml.h"
#include <algorithm>
#include <stddef.h>

/******************************** logging ********************************/
int ncclDebugLevel = -1;
uint64_t ncclDebugMask = 0;
FILE* ncclDebugFile = NULL;
thread_local int ncclDebugNoWarn = 0;
char ncclLastError[1024] = "";

static const struct { const char* name; uint64_t mask; } subsysNames[] = {
  {"INIT", NCCL_INIT}, {"COLL", NCCL_COLL}, {"P2P", NCCL_P2P}, {"SHM", NCCL_SHM}, {"NET", NCCL_NET},
  {"GRAPH", NCCL_GRAPH}, {"TUNING", NCCL_TUNING}, {"ENV", NCCL_ENV}, {"ALLOC", NCCL_ALLOC}, {"CALL", NCCL_CALL},
  {"PROXY", NCCL_PROXY}, {"NVLS", NCCL_NVLS}, {"BOOTSTRAP", NCCL_BOOTSTRAP}, {"REG", NCCL_REG},
  {"ALL", (uint64_t)NCCL_ALL}, {NULL, 0}};

static void simDebugInit() {
  if (ncclDebugLevel >= 0) return;
  const char* lvl = getenv("NCCL_DEBUG");
  int level = NCCL_LOG_WARN;
  if (lvl) {
    if (strcasecmp(lvl, "VERSION") == 0) level = NCCL_LOG_VERSION;
    else if (strcasecmp(lvl, "WARN") == 0) level = NCCL_LOG_WARN;
    else if (strcasecmp(lvl, "INFO") == 0) level = NCCL_LOG_INFO;
    else if (strcasecmp(lvl, "TRACE") == 0) level = NCCL_LOG_TRACE;
    else if (strcasecmp(lvl, "ABORT") == 0) level = NCCL_LOG_ABORT;
  }
  uint64_t mask = NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV; // NCCL's default NCCL_DEBUG_SUBSYS
  const char* sub = getenv("NCCL_DEBUG_SUBSYS");
  if (sub) {
    char* s = strdup(sub);
    char* save = NULL;
    int invert = 0;
    mask = 0;
    if (s[0] == '^') { invert = 1; mask = NCCL_ALL; }
    for (char* tok = strtok_r(s + invert, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      for (int i = 0; subsysNames[i].name; i++) {
        if (strcasecmp(tok, subsysNames[i].name) == 0) {
          if (invert) mask &= ~subsysNames[i].mask; else mask |= subsysNames[i].mask;
        }
      }
    }
    free(s);
  }
  ncclDebugMask = mask;
  ncclDebugFile = stderr;
  ncclDebugLevel = level;
}
__attribute__((constructor)) static void simDebugCtor() { simDebugInit(); }

static void simDebugLogV(ncclDebugLogLevel level, unsigned long flags, const char* file, const char* func, int line,
                         const char* fmt, va_list ap) {
  simDebugInit();
  if (ncclDebugNoWarn != 0 && level == NCCL_LOG_WARN) {
    level = NCCL_LOG_INFO;
    flags = ncclDebugNoWarn;
  }
  if (ncclDebugLevel < level || ((flags & ncclDebugMask) == 0 && level != NCCL_LOG_WARN)) {
    if (level == NCCL_LOG_WARN) { vsnprintf(ncclLastError, sizeof(ncclLastError), fmt, ap); }
    return;
  }
  char buf[4096];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  if (level == NCCL_LOG_WARN) {
    snprintf(ncclLastError, sizeof(ncclLastError), "%s", buf);
    fprintf(ncclDebugFile, "ncclsim NCCL WARN %s:%d %s\n", file ? file : "", line, buf);
  } else if (level == NCCL_LOG_TRACE && func) {
    fprintf(ncclDebugFile, "ncclsim NCCL TRACE %s:%d %s\n", func, line, buf);
  } else {
    fprintf(ncclDebugFile, "ncclsim NCCL INFO %s\n", buf);
  }
}

void ncclDebugLogInternal(ncclDebugLogLevel level, unsigned long flags, const char* file, const char* func, int line,
                          const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  simDebugLogV(level, flags, file, func, line, fmt, ap);
  va_end(ap);
}

void ncclDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* filefunc, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  simDebugLogV(level, flags, filefunc, filefunc, line, fmt, ap);
  va_end(ap);
}

/******************************** parameters ********************************/
// NCCL_* parameters come from the environment only (no /etc/nccl.conf, no env plugin).
int64_t ncclLoadParam(char const* env, int64_t deftVal, int64_t uninitialized, int64_t* cache, int8_t* noCache) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (*cache != uninitialized) return *cache;
  char name[256];
  snprintf(name, sizeof(name), "NCCL_%s", env);
  const char* str = getenv(name);
  int64_t value = deftVal;
  if (str && strlen(str) > 0) {
    errno = 0;
    value = strtoll(str, nullptr, 0);
    if (errno) value = deftVal;
    else INFO(NCCL_ENV, "%s set by environment to %lld.", name, (long long)value);
  }
  *cache = value;
  if (noCache) *noCache = 0;
  return value;
}

const char* ncclGetEnv(const char* name) { return getenv(name); }

/******************************** OS layer: no sysfs ********************************/
void ncclOsCpuZero(ncclAffinity& affinity) { CPU_ZERO(&affinity); }
int ncclOsCpuCount(const ncclAffinity& affinity) { return CPU_COUNT(&affinity); }
void ncclOsCpuSet(ncclAffinity& affinity, int cpu) { CPU_SET(cpu, &affinity); }
bool ncclOsCpuIsSet(const ncclAffinity& affinity, int cpu) { return CPU_ISSET(cpu, &affinity); }
ncclAffinity ncclOsCpuAnd(const ncclAffinity& a, const ncclAffinity& b) {
  ncclAffinity r;
  CPU_AND(&r, &a, &b);
  return r;
}
ncclResult_t ncclOsGetAffinity(ncclAffinity* affinity) { CPU_ZERO(affinity); return ncclSuccess; }
ncclResult_t ncclOsSetAffinity(const ncclAffinity& affinity) { return ncclSuccess; }
ncclResult_t ncclOsGetNumaNodeAffinity(unsigned int numaId, char* affinityStr, size_t maxLen) {
  if (maxLen) affinityStr[0] = '\0';
  return ncclSystemError;
}
ncclResult_t ncclOsGetPciDeviceClassByBusId(const char* busId, char* deviceClass, size_t maxLen) {
  if (maxLen) deviceClass[0] = '\0';
  return ncclSystemError;
}
// The emulated network plugin reports pciPath "/ncclsim/pci/<busid>": its "subsystem" is PCI.
char* ncclOsRealpath(const char* path, char* resolved_path) {
  if (strncmp(path, SIM_PCI_PREFIX, strlen(SIM_PCI_PREFIX)) == 0) {
    const char* suffix = strrchr(path, '/');
    if (suffix && strcmp(suffix, "/subsystem") == 0) {
      const char* res = "/sys/bus/pci";
      if (resolved_path) { strcpy(resolved_path, res); return resolved_path; }
      return strdup(res);
    }
  }
  return NULL;
}
ncclResult_t ncclOsGetPciPath(const char* busId, char** path) { *path = NULL; return ncclSystemError; }
ncclResult_t ncclOsTopoGetStrFromSys(const char* path, const char* fileName, char* strValue, int maxLen) {
  if (maxLen) strValue[0] = '\0';
  return ncclSuccess;
}
ncclResult_t ncclOsGetBcmLinks(const char* busId, int* nlinks, char** peers) {
  *nlinks = 0;
  *peers = NULL;
  return ncclSuccess;
}
uint64_t ncclOsGetPid() { return (uint64_t)getpid(); }

/******************************** NVML: knows the XML's GPUs ********************************/
ncclNvmlDevicePairInfo ncclNvmlDevicePairs[ncclNvmlMaxDevices][ncclNvmlMaxDevices]; // all NVML_P2P_STATUS_OK (0)

ncclResult_t ncclNvmlEnsureInitialized() { return ncclSuccess; }
ncclResult_t ncclNvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  int idx = simGpuIndexByBusId(pciBusId);
  if (idx < 0) return ncclSystemError;
  *device = (nvmlDevice_t)(intptr_t)(idx + 1);
  return ncclSuccess;
}
ncclResult_t ncclNvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  intptr_t i = (intptr_t)device - 1;
  if (i < 0 || i >= simGpuCount()) return ncclSystemError;
  *index = simGpu(i)->nvmlIndex;
  return ncclSuccess;
}
ncclResult_t ncclNvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  intptr_t i = (intptr_t)device - 1;
  if (i < 0 || i >= simGpuCount()) return ncclSystemError;
  *major = simGpu(i)->sm / 10;
  *minor = simGpu(i)->sm % 10;
  return ncclSuccess;
}
// No NVLink, C2C or PCIe information beyond what the XML file states.
ncclResult_t ncclNvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned, nvmlEnableState_t*) { return ncclSystemError; }
ncclResult_t ncclNvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t, unsigned, nvmlPciInfo_t*) { return ncclSystemError; }
ncclResult_t ncclNvmlDeviceGetNvLinkCapability(nvmlDevice_t, unsigned, nvmlNvLinkCapability_t, unsigned*) {
  return ncclSystemError;
}
ncclResult_t ncclNvmlDeviceGetFieldValues(nvmlDevice_t, int, nvmlFieldValue_t*) { return ncclSystemError; }
ncclResult_t ncclNvmlDeviceGetPciInfo(nvmlDevice_t, nvmlPciInfo_t*) { return ncclSystemError; }
ncclResult_t ncclNvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t, unsigned int*) { return ncclSystemError; }
ncclResult_t ncclNvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t, unsigned int*) { return ncclSystemError; }

/******************************** CUDA runtime: no device ********************************/
extern "C" {
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "ncclsim: no CUDA device"; }
cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp*, int) { return cudaErrorNoDevice; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp*, int) { return cudaErrorNoDevice; }
cudaError_t cudaGetDevice(int*) { return cudaErrorNoDevice; }
cudaError_t cudaFree(void*) { return cudaSuccess; }
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode*) { return cudaSuccess; }
}

/******************************** network plugin device counts ********************************/
ncclResult_t ncclNetGetDevCount(int netPluginIndex, int* nPhysDevs, int* nVirtDevs) {
  simNetGetDevCount(nPhysDevs, nVirtDevs);
  return ncclSuccess;
}
ncclResult_t ncclNetSetVirtDevCount(int netPluginIndex, int count) {
  simNetSetVirtDevCount(count);
  return ncclSuccess;
}
ncclResult_t ncclCollNetGetDevCount(int, int*, int*) { return ncclInternalError; }
ncclResult_t ncclCollNetSetVirtDevCount(int, int) { return ncclInternalError; }
ncclResult_t ncclGinGetDevCount(int, int*, int*) { return ncclInternalError; }
ncclResult_t ncclRmaGetDevCount(int, int*, int*) { return ncclInternalError; }

/******************************** bootstrap: threads of one process ********************************/
// Intra-node all-gather between the local ranks, which run as threads (like ncclCommInitAll).
// The ranks leave it one at a time, in rank order (simAllGatherTurnDone() passes the turn on): an MNNVL
// clique of 72 ranks fuses 72 XMLs in every rank, and one rank at a time keeps that within a few hundred
// MB.  The data of ncclTopoGetSystem's all-gather are XMLs (struct ncclXml of NCCL_TOPO_XML_MAX_NODES
// nodes): only the nodes in use (maxIndex) are copied -- ncclTopoConvertXml and ncclTopoFuseXml read no
// others.  Neither changes what the ranks compute.
static std::mutex agMutex;
static std::condition_variable agCond;
static int agArrived = 0, agLeft = 0, agGeneration = 0, agTurn = 0;
static char* agBuf = NULL;

static size_t agUsed(const char* slot, size_t size) {
  if (size != xmlMemSize(NCCL_TOPO_XML_MAX_NODES)) return size;
  const struct ncclXml* x = (const struct ncclXml*)slot;
  size_t used = offsetof(struct ncclXml, nodes) + sizeof(struct ncclXmlNode) * (size_t)std::max(x->maxIndex, 0);
  return std::min(used, size);
}

void simAllGatherTurnDone() {
  std::lock_guard<std::mutex> lock(agMutex);
  agTurn++;
  agCond.notify_all();
}

ncclResult_t bootstrapIntraNodeAllGather(void* commState, int* ranks, int rank, int nranks, void* allData, int size) {
  std::unique_lock<std::mutex> lock(agMutex);
  agCond.wait(lock, [&] { return agArrived < nranks; }); // previous round fully drained
  if (agArrived == 0) {
    agBuf = (char*)malloc((size_t)nranks * (size_t)size);
    agTurn = 0;
  }
  char* mine = (char*)allData + (size_t)rank * size;
  memcpy(agBuf + (size_t)rank * size, mine, agUsed(mine, size));
  agArrived++;
  int gen = agGeneration;
  if (agArrived == nranks) {
    agGeneration++;
    agCond.notify_all();
  } else {
    agCond.wait(lock, [&] { return agGeneration != gen; });
  }
  agCond.wait(lock, [&] { return agTurn == rank; });
  for (int r = 0; r < nranks; r++) {
    if (r != rank) {
      char* src = agBuf + (size_t)r * size;
      memcpy((char*)allData + (size_t)r * size, src, agUsed(src, size));
    }
  }
  if (++agLeft == nranks) {
    free(agBuf);
    agBuf = NULL;
    agArrived = agLeft = 0;
    agCond.notify_all();
  }
  return ncclSuccess;
}

/******************************** transports: canConnect ********************************/
// P2P: the topology checks of p2pCanConnect (transport/p2p.cc), assuming CUDA reports P2P access
// between the GPUs (cudaDeviceCanAccessPeer) and cuMem/IPC work, as on a healthy machine.
static ncclResult_t simP2pCanConnect(int* ret, struct ncclComm* comm, struct ncclTopoGraph* graph,
                                     struct ncclPeerInfo* info1, struct ncclPeerInfo* info2) {
  int intermediateRank;
  NCCLCHECK(ncclTopoCheckP2p(comm, comm->topo, info1->rank, info2->rank, ret, NULL, &intermediateRank, NULL));
  if (*ret == 0) return ncclSuccess;
  if (intermediateRank != -1) return ncclSuccess;
  int useNet = 0;
  NCCLCHECK(ncclTopoCheckNet(comm->topo, info1->rank, info2->rank, &useNet));
  if (useNet) {
    *ret = 0;
    return ncclSuccess;
  }
  return ncclSuccess;
}
// SHM: shmCanConnect (transport/shm.cc) with NCCL_SHM_DISABLE read from the environment.
static ncclResult_t simShmCanConnect(int* ret, struct ncclComm* comm, struct ncclTopoGraph* graph,
                                     struct ncclPeerInfo* info1, struct ncclPeerInfo* info2) {
  *ret = 0;
  const char* dis = getenv("NCCL_SHM_DISABLE");
  if (dis && atoi(dis) == 1) return ncclSuccess;
  int useNet = 0;
  NCCLCHECK(ncclTopoCheckNet(comm->topo, info1->rank, info2->rank, &useNet));
  if (useNet) return ncclSuccess;
  if (info1->hostHash != info2->hostHash) return ncclSuccess;
  if (info1->shmDev != info2->shmDev) return ncclSuccess;
  *ret = 1;
  return ncclSuccess;
}
static struct ncclTransport simP2pTransport = {"P2P", simP2pCanConnect, {}, {}};
static struct ncclTransport simShmTransport = {"SHM", simShmCanConnect, {}, {}};
static struct ncclTransport simNetTransport = {"NET", NULL, {}, {}};
static struct ncclTransport simCollNetTransport = {"COL", NULL, {}, {}};
static struct ncclTransport simProfTransport = {"PRF", NULL, {}, {}};
struct ncclTransport* ncclTransports[NTRANSPORTS + 1] = {&simP2pTransport, &simShmTransport, &simNetTransport,
                                                         &simCollNetTransport, &simProfTransport};

/******************************** misc ********************************/
// Channels live on the host only here: initChannel (channel.cc) allocates device memory.
ncclResult_t initChannel(struct ncclComm* comm, int channelId) {
  comm->channels[channelId].id = channelId;
  return ncclSuccess;
}

// Tables and parameters defined in init.cc (not compiled here).
const char* ncclFuncStr[NCCL_NUM_FUNCTIONS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
const char* ncclAlgoStr[NCCL_NUM_ALGORITHMS] = {"Tree",     "Ring", "CollNetDirect", "CollNetChain", "NVLS",
                                                "NVLSTree", "PAT"};
const char* ncclProtoStr[NCCL_NUM_PROTOCOLS] = {"LL", "LL128", "Simple"};
NCCL_PARAM(WorkArgsBytes, "WORK_ARGS_BYTES", INT64_MAX);

// No registered buffers.
ncclResult_t ncclRegLocalIsValid(struct ncclReg* reg, bool* isValid) {
  *isValid = false;
  return ncclSuccess;
}
char* ncclOsStrSep(char** stringp, const char* delim) { return strsep(stringp, delim); }
