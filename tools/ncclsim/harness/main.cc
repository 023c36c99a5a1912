/*
 * ncclsim: run NCCL's own topology detection, path computation, graph search (ring, tree, NVLS),
 * channel setup (ncclTopoPreset/Postset) and tuning model (ncclTopoTuneModel, ncclGetAlgoInfo)
 * on a CPU-only machine, for the machine described by an NCCL topology XML file.
 *
 * The local ranks (one per GPU of the node) run as threads of this process, as with
 * ncclCommInitAll; each goes through the first half of initTransportsRank (init.cc) with NCCL's
 * functions.  Other nodes (--nodes N > 1) are copies of this node: their ranks' all-gather data is
 * this node's, with ranks shifted by node * localRanks (what those ranks would compute from the
 * same XML).  The glue between NCCL's functions below follows initTransportsRank (init.cc).
 *
 * Multi-node NVLink (--mnnvl-clique K): every GPU reports NVML fabric info (cluster UUID per NVLink
 * domain of --mnnvl-domain hosts, clique id per K consecutive hosts, --fabric-state); fillInfo's
 * NCCL_MNNVL_UUID / NCCL_MNNVL_CLIQUE_ID overrides and the MNNVL check of init.cc/mnnvl.cc are
 * emulated (cuMem and FABRIC handles assumed to work where the GPUs have fabric info).  With MNNVL
 * on, the ranks of clique 0 (K hosts) run as threads with comm->MNNVL=1, their clique, and a host
 * hash per host (getHostHash() is per thread: the XML's CPUs get their host's hash), so NCCL's own
 * ncclTopoGetSystem fuses the hosts' XMLs; other cliques are copies of clique 0.
 */
#include "core.h"
#include "comm.h"
#include "graph.h"
#include "topo.h"
#include "xml.h"
#include "net.h"
#include "enqueue.h"
#include "transport.h"
#include "machine.h"
#include <pthread.h>
#include <string>
#include <vector>
#include <sstream>
#include <float.h>
#include <math.h>
#include <sys/stat.h>
#include <mutex>
#include <malloc.h>

extern ncclResult_t ncclNvlsTuning(struct ncclComm* comm);
extern int64_t ncclParamNvlsEnable();

struct graphInfo {
  int pattern;
  int nChannels;
  int sameChannels;
  float bwIntra;
  float bwInter;
  int typeIntra;
  int typeInter;
  int crossNic;
};
struct allGatherInfo {
  struct graphInfo graphInfo[NCCL_NUM_ALGORITHMS];
  struct ncclTopoRanks topoRanks;
  int cpuArch;
  int cpuVendor;
  int localRanks;
  int p2pnChannelsPerPeer;
  int p2pMaxPeers;
  float minNetBw;
  int localNetDeviceCount;
  int localNetDeviceBw;
  int localCollNetCount;
  int isAllNvlink;
};

struct Options {
  const char* xml = NULL;
  int nodes = 1;
  std::vector<int> gpuSel;
  std::vector<size_t> sizes;
  int nvls = -1; // -1: emulate the multicast attribute (sm90+ with NVSwitch)
  bool paths = false;
  bool verbose = false;
  bool json = false;
  bool graphsOnly = false;
  int clique = 0;       // --mnnvl-clique: hosts per NVLink clique (0: GPUs without fabric info)
  int domain = 0;       // --mnnvl-domain: hosts per NVLink domain (cluster UUID); default = clique
  int fabricState = NVML_GPU_FABRIC_STATE_COMPLETED;
  bool mnnvlFull = false; // --mnnvl-full: every rank of a clique runs in full (no shared system)
  SimOptions sim;
};
static Options opt;

struct RankCtx {
  struct ncclComm* comm;
  struct allGatherInfo ag;
  ncclResult_t ret;
  int nvlsSupport;
};

static int G = 0;             // GPUs used on each host (node)
static int NR = 0;            // total ranks
static int L = 0;             // ranks run as threads: one host (G), or one MNNVL clique (K hosts x G)
static std::vector<int> gpuOfLocal; // GPU of a host's rank (rank % G) -> index into simGpu()
static int mnnvl = 0;         // the MNNVL check's outcome (the same on every rank: symmetric cliques)
static int nvlDomainSize = 0; // ranks in rank 0's NVLink domain (same cluster UUID)
static unsigned cliqueId0 = 0;
static thread_local int simHost = 0; // the host the calling rank thread runs on

// getHostHash() of the calling rank's host: NCCL's own value (hostname) for host 0, shifted per host.
// Linked with -Wl,--wrap so that NCCL's topo.cc (host_hash of the XML's CPUs, ncclTopoGetSystemFromXml)
// sees the host of the thread calling it.
extern "C" uint64_t __real__Z11getHostHashv();
extern "C" uint64_t __wrap__Z11getHostHashv() { return __real__Z11getHostHashv() + (uint64_t)simHost * 0x100000001ULL; }

#define CHECK(cmd)                                                                                  \
  do {                                                                                              \
    ncclResult_t r_ = (cmd);                                                                        \
    if (r_ != ncclSuccess) {                                                                        \
      fprintf(stderr, "ncclsim: %s failed: %s (%d) %s\n", #cmd, ncclGetErrorString(r_), r_, ncclLastError); \
      return r_;                                                                                    \
    }                                                                                               \
  } while (0)

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error";
  case ncclSystemError: return "unhandled system error";
  case ncclInternalError: return "internal error";
  case ncclInvalidArgument: return "invalid argument";
  case ncclInvalidUsage: return "invalid usage";
  default: return "unknown result code";
  }
}

static uint64_t hostHashOfNode(int node) { return __real__Z11getHostHashv() + (uint64_t)node * 0x100000001ULL; }

NCCL_PARAM(MNNVLEnableSim, "MNNVL_ENABLE", 2);
NCCL_PARAM(MNNVLUUIDSim, "MNNVL_UUID", -1);
NCCL_PARAM(MNNVLCliqueIdSim, "MNNVL_CLIQUE_ID", -1);
NCCL_PARAM(CuMemEnableSim, "CUMEM_ENABLE", -2);

// NVML's fabric info of a GPU on `host` (nvmlDeviceGetGpuFabricInfoV), then fillInfo's overrides (init.cc).
static void fillFabricInfo(nvmlGpuFabricInfoV_t* f, int host) {
  memset(f, 0, sizeof(*f));
  f->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  if (opt.clique <= 0) return;
  int dom = host / opt.domain;
  unsigned long u0 = 0x6e766c646f6d0000ULL + dom, u1 = 0x4e43434c53494dULL; // "nvldom"+domain, "NCCLSIM"
  memcpy(f->clusterUuid, &u0, sizeof(u0));
  memcpy(f->clusterUuid + sizeof(u0), &u1, sizeof(u1));
  f->cliqueId = 0x7ffe - (unsigned)((host % opt.domain) / opt.clique);
  f->state = opt.fabricState;
  f->healthMask = 0;
  if (f->state != NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) {
    if (ncclParamMNNVLUUIDSim() != -1) {
      unsigned long t = (unsigned long)ncclParamMNNVLUUIDSim();
      memcpy(f->clusterUuid, &t, sizeof(t));
      memcpy(f->clusterUuid + sizeof(t), &t, sizeof(t));
    }
    if (ncclParamMNNVLCliqueIdSim() != -1) f->cliqueId = (unsigned)ncclParamMNNVLCliqueIdSim();
  }
}

// init.cc's gate and ncclMnnvlCheck (mnnvl.cc) for `rank`: returns MNNVL, fills the clique (cuMem and
// FABRIC handle export/import assumed to work: CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is taken
// to be 1 exactly when NVML reports fabric info).
static int mnnvlCheck(struct ncclPeerInfo* info, int rank, std::vector<int>* clique, int* cliqueRank, int* domSize) {
  int nNodes = 1;
  for (int i = 0; i < NR; i++)
    if (info[i].hostHash != info[rank].hostHash) nNodes++;
  int p2pLevel = -1;
  ncclGetUserP2pLevel(&p2pLevel);
  int64_t en = ncclParamMNNVLEnableSim();
  if (!((nNodes > 1 && en != 0 && p2pLevel != 0) || en == 1)) return 0;
  if (ncclParamCuMemEnableSim() == 0) return 0;
  if (info[rank].fabricInfo.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) return 0;
  for (int i = 0; i < NR; i++)
    if (info[i].fabricInfo.state != NVML_GPU_FABRIC_STATE_COMPLETED) return 0;
  clique->clear();
  *domSize = 0;
  for (int i = 0; i < NR; i++) {
    nvmlGpuFabricInfoV_t* f1 = &info[rank].fabricInfo;
    nvmlGpuFabricInfoV_t* f2 = &info[i].fabricInfo;
    unsigned long u0 = 0, u1 = 0;
    memcpy(&u0, f2->clusterUuid, sizeof(u0));
    memcpy(&u1, f2->clusterUuid + sizeof(u0), sizeof(u1));
    if ((u0 | u1) == 0) return 0;
    if (memcmp(f1->clusterUuid, f2->clusterUuid, NVML_GPU_FABRIC_UUID_LEN) == 0) {
      (*domSize)++;
      if (f1->cliqueId == f2->cliqueId) {
        if (i == rank) *cliqueRank = clique->size();
        clique->push_back(i);
      }
    }
  }
  if (clique->size() <= 1 && *domSize <= 1) return 0;
  return 1;
}

static void fillPeerInfo(struct ncclPeerInfo* info, struct ncclComm** localComms) {
  for (int r = 0; r < NR; r++) {
    int node = r / G, local = r % G;
    const SimGpu* g = simGpu(gpuOfLocal[local]);
    struct ncclPeerInfo* p = info + r;
    memset(p, 0, sizeof(*p));
    p->rank = r;
    p->cudaDev = local;
    p->nvmlDev = g->nvmlIndex;
    p->gdrSupport = 1;
    p->hostHash = hostHashOfNode(node);
    p->pidHash = p->hostHash + 0x1000 + local; // one process per GPU
    p->shmDev = 0;
    busIdToInt64(g->busId.c_str(), &p->busId);
    p->comm = r < L ? localComms[r] : NULL;
    p->cudaCompCap = g->sm;
    p->totalGlobalMem = 1ULL << 36;
    p->cuMemSupport = 1;
    p->version = NCCL_VERSION_CODE;
    p->supportedGinType = NCCL_GIN_TYPE_NONE;
    p->crossNicSupport = true;
    p->mloPart = NCCL_TOPO_UNDEF;
    fillFabricInfo(&p->fabricInfo, node);
  }
}

static ncclResult_t commSetup(struct ncclComm* comm, int rank, struct ncclPeerInfo* peerTemplate,
                              const std::vector<int>& clique) {
  const SimGpu* g = simGpu(gpuOfLocal[rank % G]);
  comm->rank = rank;
  comm->nRanks = NR;
  comm->cudaDev = rank % G;
  comm->nvmlDev = g->nvmlIndex;
  comm->compCap = g->sm;
  busIdToInt64(g->busId.c_str(), &comm->busId);
  NCCLCHECK(ncclCalloc(&comm->peerInfo, NR + 1));
  memcpy(comm->peerInfo, peerTemplate, sizeof(struct ncclPeerInfo) * NR);
  NCCLCHECK(ncclCalloc(&comm->sharedRes, 1));
  comm->sharedRes->owner = comm;
  comm->sharedRes->tpNRanks = NR;
  comm->sharedRes->tpNChannels = MAXCHANNELS;
  comm->ncclNet = simNetPlugin();
  comm->ncclCollNet = NULL;
  comm->netPluginIndex = 0;
  comm->ncclNetVer = 12;
  comm->netDeviceType = NCCL_NET_DEVICE_HOST;
  comm->dmaBufSupport = true;
  comm->MNNVL = mnnvl;
  if (mnnvl) {
    NCCLCHECK(ncclCalloc(&comm->clique.ranks, NR));
    comm->clique.id = comm->peerInfo[rank].fabricInfo.cliqueId;
    comm->clique.size = clique.size();
    for (size_t i = 0; i < clique.size(); i++) {
      comm->clique.ranks[i] = clique[i];
      if (clique[i] == rank) comm->cliqueRank = i;
    }
    comm->nvlDomainSize = nvlDomainSize;
  }
  comm->config.minCTAs = 1;
  comm->config.maxCTAs = MAXCHANNELS;
  comm->config.collnetEnable = 0;
  comm->config.CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  comm->config.nvlsCTAs = NCCL_CONFIG_UNDEF_INT;
  comm->config.nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT;
  comm->config.maxP2pPeers = NCCL_CONFIG_UNDEF_INT;
  comm->minCompCap = comm->maxCompCap = comm->compCap;
  for (int i = 0; i < NR; i++) {
    comm->minCompCap = std::min(comm->minCompCap, comm->peerInfo[i].cudaCompCap);
    comm->maxCompCap = std::max(comm->maxCompCap, comm->peerInfo[i].cudaCompCap);
  }
  for (int c = 0; c < MAXCHANNELS; c++) comm->channels[c].id = -1;
  comm->tuner = NULL;
  return ncclSuccess;
}

void simAllGatherTurnDone();       // stubs.cc: the next rank may leave ncclTopoGetSystem's all-gather
static std::mutex heavyMutex;

/* Symmetric cliques.  Every rank of an MNNVL clique fuses the same XMLs in the same order (ncclTopoGetSystem),
 * so they all build the same system (only system->systemId, the rank's own host, differs, and nothing before
 * ncclTopoPreset reads it).  Paths do not depend on the rank here: ncclTopoComputePaths asks NVML's P2P
 * status (OK for every pair in this emulation) and the P2P/SHM canConnect of stubs.cc, which look at the two
 * peers only.  ncclTopoTrimSystem keeps the rank's domain: every GPU when rank 0 keeps every GPU (domains
 * come from the paths).  ncclTopoSearchInit and the ring, tree and NVLS searches (ncclTopoCompute) are
 * functions of the system and the graphs' parameters, one after the other on the same system.  So a rank
 * whose fresh system prints the same as rank 0's (simSystemPrint: every node, field and link) would go
 * through exactly rank 0's steps to rank 0's state: when rank 0's trim removed no GPU, it takes over rank 0's
 * system and graphs, and runs only its own steps (CPU, NVLS support, NET counts, ncclTopoPreset, which read
 * the paths and graphs, not the links' remaining bandwidth) with NCCL's code.  72 ranks of 72 GPUs then take
 * one search instead of 72 (13 minutes and 9 GB otherwise); --mnnvl-full runs every rank in full (the test
 * suite checks that both give the same answers). */
struct SharedRank0 {
  bool valid = false;
  std::string fresh;                 // rank 0's system as ncclTopoGetSystem built it
  struct ncclTopoSystem* topo = NULL; // after paths, trim, search init (rank 0's own, never freed)
  int nvlsSupport = 0;
  struct ncclTopoGraph graphs[3];    // ring, tree, nvls
};
static SharedRank0 shared0;

static void printAppend(std::string* o, const void* p, size_t n) { o->append((const char*)p, n); }
static void printNodeRef(std::string* o, struct ncclTopoSystem* sys, const struct ncclTopoNode* n) {
  int ref[2] = {-1, -1};
  for (int t = 0; t < NCCL_TOPO_NODE_TYPES && n; t++)
    if (n >= sys->nodes[t].nodes && n < sys->nodes[t].nodes + sys->nodes[t].count) {
      ref[0] = t;
      ref[1] = (int)(n - sys->nodes[t].nodes);
    }
  printAppend(o, ref, sizeof(ref));
}
// Everything of a system as ncclTopoGetSystem builds it, but systemId; pointers as node positions.
static std::string simSystemPrint(struct ncclTopoSystem* sys) {
  std::string o;
  printAppend(&o, &sys->nHosts, sizeof(int));
  printAppend(&o, sys->hostHashes, sizeof(uint64_t) * sys->nHosts);
  printAppend(&o, &sys->maxBw, sizeof(float));
  printAppend(&o, &sys->totalBw, sizeof(float));
  printAppend(&o, &sys->inter, sizeof(int));
  for (int t = 0; t < NCCL_TOPO_NODE_TYPES; t++) {
    printAppend(&o, &sys->nodes[t].count, sizeof(int));
    for (int i = 0; i < sys->nodes[t].count; i++) {
      struct ncclTopoNode* n = sys->nodes[t].nodes + i;
      printAppend(&o, &n->type, sizeof(int));
      printAppend(&o, &n->id, sizeof(int64_t));
      if (t == GPU) {
        printAppend(&o, &n->gpu.dev, 5 * sizeof(int));
        printNodeRef(&o, sys, n->gpu.parent);
      } else {
        printAppend(&o, &n->net, sizeof(n->net) > sizeof(n->cpu) ? sizeof(n->net) : sizeof(n->cpu));
      }
      printAppend(&o, &n->nlinks, sizeof(int));
      for (int l = 0; l < n->nlinks; l++) {
        printAppend(&o, &n->links[l].type, sizeof(int));
        printAppend(&o, &n->links[l].bw, sizeof(float));
        printNodeRef(&o, sys, n->links[l].remNode);
      }
      printAppend(&o, &n->used, sizeof(uint64_t));
    }
  }
  return o;
}

// First half of initTransportsRank (init.cc), for one local rank.
static ncclResult_t rankInit(RankCtx* ctx) {
  struct ncclComm* comm = ctx->comm;
  int rank = comm->rank;
  struct ncclTopoGraph* ringGraph = &comm->graphs[NCCL_ALGO_RING];
  struct ncclTopoGraph* treeGraph = &comm->graphs[NCCL_ALGO_TREE];
  struct ncclTopoGraph* collNetChainGraph = &comm->graphs[NCCL_ALGO_COLLNET_CHAIN];
  struct ncclTopoGraph* collNetDirectGraph = &comm->graphs[NCCL_ALGO_COLLNET_DIRECT];
  struct ncclTopoGraph* nvlsGraph = &comm->graphs[NCCL_ALGO_NVLS];
  struct ncclTopoGraph* graphs[NCCL_NUM_ALGORITHMS] = {treeGraph, ringGraph, collNetDirectGraph, collNetChainGraph,
                                                       nvlsGraph, nvlsGraph, treeGraph};

  ncclResult_t sysRet = ncclTopoGetSystem(comm, &comm->topo);
  simAllGatherTurnDone();
  CHECK(sysRet);
  // The rest, one rank at a time (the systems of a 72-GPU clique hold hundreds of MB of paths each).
  std::lock_guard<std::mutex> heavy(heavyMutex);
  bool share = false, record = false;
  std::string fresh;
  if (mnnvl && !opt.mnnvlFull) {
    fresh = simSystemPrint(comm->topo);
    if (rank == 0) record = true;
    else share = shared0.valid && fresh == shared0.fresh;
  }
  int gpusBefore = comm->topo->nodes[GPU].count;
  if (share) {
    ncclTopoFree(comm->topo);
    comm->topo = shared0.topo;
  } else {
    CHECK(ncclTopoComputePaths(comm->topo, comm));
    CHECK(ncclTopoTrimSystem(comm->topo, comm));
    CHECK(ncclTopoComputePaths(comm->topo, comm));
    CHECK(ncclTopoSearchInit(comm->topo));
  }
  CHECK(ncclTopoComputeCommCPU(comm));
  if (rank == 0 && opt.verbose) CHECK(ncclTopoPrint(comm->topo));

  // ncclNvlsInit (transport/nvls.cc): the CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED query is emulated as
  // "sm90 or later and the node has an NVSwitch"; NCCL_NVLS_ENABLE / --nvls override it.
  {
    comm->nvlsSupport = 0;
    comm->nvlsChannels = 0;
    int gpuCount, nvsCount;
    CHECK(ncclTopoGetGpuCount(comm->topo, &gpuCount));
    CHECK(ncclTopoGetNvsCount(comm->topo, &nvsCount));
    int64_t en = ncclParamNvlsEnable();
    if (en != 0 && gpuCount >= 2) {
      if (opt.nvls >= 0) comm->nvlsSupport = opt.nvls;
      else if (en == 2) comm->nvlsSupport = (comm->compCap >= 90 && nvsCount > 0) ? 1 : 0;
      else comm->nvlsSupport = 1;
    }
  }
  if (share && comm->nvlsSupport != shared0.nvlsSupport) {
    fprintf(stderr, "ncclsim: rank %d: NVLS support differs from rank 0's (use --mnnvl-full)\n", rank);
    return ncclInvalidUsage;
  }

  if (share) {
    *ringGraph = shared0.graphs[0];
    *treeGraph = shared0.graphs[1];
    *nvlsGraph = shared0.graphs[2];
  } else {
    memset(ringGraph, 0, sizeof(struct ncclTopoGraph));
    ringGraph->id = 0;
    ringGraph->pattern = NCCL_TOPO_PATTERN_RING;
    ringGraph->minChannels = 1;
    ringGraph->maxChannels = MAXCHANNELS / 2;
    CHECK(ncclTopoCompute(comm->topo, ringGraph));
    CHECK(ncclTopoPrintGraph(comm->topo, ringGraph));

    memset(treeGraph, 0, sizeof(struct ncclTopoGraph));
    treeGraph->id = 1;
    treeGraph->pattern = NCCL_TOPO_PATTERN_BALANCED_TREE;
    treeGraph->minChannels = ringGraph->nChannels;
    treeGraph->maxChannels = ringGraph->nChannels;
    CHECK(ncclTopoCompute(comm->topo, treeGraph));
    CHECK(ncclTopoPrintGraph(comm->topo, treeGraph));
  }

  memset(collNetChainGraph, 0, sizeof(struct ncclTopoGraph));
  collNetChainGraph->id = 2;
  collNetChainGraph->pattern = NCCL_TOPO_PATTERN_TREE;
  collNetChainGraph->collNet = 1;
  collNetChainGraph->minChannels = ringGraph->nChannels;
  collNetChainGraph->maxChannels = ringGraph->nChannels;

  memset(collNetDirectGraph, 0, sizeof(struct ncclTopoGraph));
  collNetDirectGraph->id = 4;
  collNetDirectGraph->pattern = NCCL_TOPO_PATTERN_COLLNET_DIRECT;
  collNetDirectGraph->collNet = 1;
  collNetDirectGraph->minChannels = 1;
  collNetDirectGraph->maxChannels = MAXCHANNELS;

  if (!share) {
    memset(nvlsGraph, 0, sizeof(struct ncclTopoGraph));
    nvlsGraph->id = 3;
    nvlsGraph->pattern = NCCL_TOPO_PATTERN_NVLS;
    nvlsGraph->minChannels = 1;
    nvlsGraph->maxChannels = MAXCHANNELS;
    if (comm->nvlsSupport) {
      CHECK(ncclTopoCompute(comm->topo, nvlsGraph));
      CHECK(ncclTopoPrintGraph(comm->topo, nvlsGraph));
    }
  }
  ctx->nvlsSupport = comm->nvlsSupport;
  if (record) {
    shared0.valid = comm->topo->nodes[GPU].count == gpusBefore;
    shared0.fresh = fresh;
    shared0.topo = comm->topo;
    shared0.nvlsSupport = comm->nvlsSupport;
    shared0.graphs[0] = *ringGraph;
    shared0.graphs[1] = *treeGraph;
    shared0.graphs[2] = *nvlsGraph;
  }

  // AllGather3 data
  struct allGatherInfo* ag = &ctx->ag;
  memset(ag, 0, sizeof(*ag));
  int localNetDeviceCount = 0, localNetDeviceBw = 0;
  if (comm->ncclNet && comm->ncclNet->devices) {
    int gpu;
    float bw;
    CHECK(comm->ncclNet->devices(&localNetDeviceCount));
    CHECK(ncclTopoRankToIndex(comm->topo, comm->rank, &gpu, false));
    CHECK(ncclTopoGetLocalNetCountByBw(comm->topo, gpu, &localNetDeviceBw, &bw));
  }
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
    ag->graphInfo[a].pattern = graphs[a]->pattern;
    ag->graphInfo[a].nChannels = graphs[a]->nChannels;
    ag->graphInfo[a].sameChannels = graphs[a]->sameChannels;
    ag->graphInfo[a].bwIntra = graphs[a]->bwIntra;
    ag->graphInfo[a].bwInter = graphs[a]->bwInter;
    ag->graphInfo[a].typeIntra = graphs[a]->typeIntra;
    ag->graphInfo[a].typeInter = graphs[a]->typeInter;
    ag->graphInfo[a].crossNic = graphs[a]->crossNic;
  }
  ag->cpuArch = comm->cpuArch;
  ag->cpuVendor = comm->cpuVendor;
  ag->p2pnChannelsPerPeer = comm->p2pnChannelsPerPeer;
  ag->p2pMaxPeers = comm->p2pMaxPeers;
  ag->localNetDeviceCount = localNetDeviceCount;
  ag->localNetDeviceBw = localNetDeviceBw;
  ag->localCollNetCount = 0;
  CHECK(ncclTopoGetMinNetBw(comm->topo, comm->rank, &ag->minNetBw));
  CHECK(ncclTopoPathAllNVLink(comm->topo, &comm->isAllNvlink));
  ag->isAllNvlink = comm->isAllNvlink;

  comm->nChannels = std::min(treeGraph->nChannels, ringGraph->nChannels);
  CHECK(ncclTopoPreset(comm, graphs, &ag->topoRanks));
  if (rank != 0) {   // only rank 0's system is read after this (merge, postset, tuning, output)
    if (comm->topo != shared0.topo) ncclTopoFree(comm->topo);
    comm->topo = NULL;
  }
  return ncclSuccess;
}

static void* rankThread(void* arg) {
  RankCtx* ctx = (RankCtx*)arg;
  simHost = ctx->comm->rank / G;
  ctx->ret = rankInit(ctx);
  return NULL;
}

static int shiftRank(int r, int delta) { return r < 0 ? r : r + delta; }

static void shiftTopoRanks(struct ncclTopoRanks* t, int delta) {
  for (int c = 0; c < MAXCHANNELS; c++) {
    t->ringRecv[c] = shiftRank(t->ringRecv[c], delta);
    t->ringSend[c] = shiftRank(t->ringSend[c], delta);
    t->ringPrev[c] = shiftRank(t->ringPrev[c], delta);
    t->ringNext[c] = shiftRank(t->ringNext[c], delta);
    t->treeToParent[c] = shiftRank(t->treeToParent[c], delta);
    t->treeToChild0[c] = shiftRank(t->treeToChild0[c], delta);
    t->treeToChild1[c] = shiftRank(t->treeToChild1[c], delta);
    t->nvlsHeads[c] = shiftRank(t->nvlsHeads[c], delta);
  }
}

/******************************** output helpers ********************************/
static const char* pathStr(int t) { return (t >= 0 && t <= PATH_DIS) ? topoPathTypeStr[t] : "?"; }

// A NET's name; in a system fused from several hosts (MNNVL), "@" and its host (system id).
static std::string netName(struct ncclTopoSystem* sys, int64_t id) {
  for (int n = 0; n < sys->nodes[NET].count; n++) {
    struct ncclTopoNode* net = sys->nodes[NET].nodes + n;
    if (net->id == id) {
      std::string host = sys->nHosts > 1 ? "@" + std::to_string((int)NCCL_TOPO_ID_SYSTEM_ID(net->id)) : "";
      ncclNetProperties_t props;
      if (simNetPlugin()->getProperties(net->net.dev, &props) == ncclSuccess) return props.name + host;
      return "dev" + std::to_string(net->net.dev) + host;
    }
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "NET?%lx", (long)id);
  return buf;
}

static std::string jsonStr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

static const char* patternStr(int p) {
  switch (p) {
  case NCCL_TOPO_PATTERN_BALANCED_TREE: return "BALANCED_TREE";
  case NCCL_TOPO_PATTERN_SPLIT_TREE: return "SPLIT_TREE";
  case NCCL_TOPO_PATTERN_TREE: return "TREE";
  case NCCL_TOPO_PATTERN_RING: return "RING";
  case NCCL_TOPO_PATTERN_NVLS: return "NVLS";
  case NCCL_TOPO_PATTERN_COLLNET_DIRECT: return "COLLNET_DIRECT";
  default: return "?";
  }
}

// Graph as searched by ncclTopoCompute on rank 0 (before the cross-rank min of initTransportsRank).
static std::string graphJson(struct ncclTopoSystem* sys, struct ncclTopoGraph* g, const char* name, bool text) {
  std::ostringstream o;
  int ngpus = sys->nodes[GPU].count;
  if (text) {
    printf("%s graph: pattern %s, %d channel(s) x %.2f/%.2f GB/s (intra/inter) = %.2f GB/s, type %s/%s, "
           "sameChannels %d, crossNic %d, nHops %d\n",
           name, patternStr(g->pattern), g->nChannels, g->bwIntra, g->bwInter, g->nChannels * g->bwIntra,
           pathStr(g->typeIntra), pathStr(g->typeInter), g->sameChannels, g->crossNic, g->nHops);
    for (int c = 0; c < g->nChannels; c++) {
      printf("  %s %2d :", name, c);
      if (sys->inter) printf(" %s ->", netName(sys, g->inter[c * 2]).c_str());
      for (int i = 0; i < ngpus; i++) printf(" %d", g->intra[c * ngpus + i]);
      if (sys->inter) printf(" -> %s", netName(sys, g->inter[c * 2 + 1]).c_str());
      printf("\n");
    }
  }
  o << "{\"pattern\":\"" << patternStr(g->pattern) << "\",\"nChannels\":" << g->nChannels << ",\"bwIntra\":" << g->bwIntra
    << ",\"bwInter\":" << g->bwInter << ",\"totalBw\":" << g->nChannels * g->bwIntra << ",\"typeIntra\":\""
    << pathStr(g->typeIntra) << "\",\"typeInter\":\"" << pathStr(g->typeInter) << "\",\"sameChannels\":"
    << g->sameChannels << ",\"crossNic\":" << g->crossNic << ",\"nHops\":" << g->nHops << ",\"channels\":[";
  for (int c = 0; c < g->nChannels; c++) {
    if (c) o << ",";
    o << "{\"ranks\":[";
    for (int i = 0; i < ngpus; i++) o << (i ? "," : "") << g->intra[c * ngpus + i];
    o << "]";
    if (sys->inter)
      o << ",\"nets\":[" << jsonStr(netName(sys, g->inter[c * 2])) << "," << jsonStr(netName(sys, g->inter[c * 2 + 1]))
        << "]";
    o << "}";
  }
  o << "]}";
  return o.str();
}

static std::string pathsJson(struct ncclTopoSystem* sys, bool text) {
  std::ostringstream o;
  int ng = sys->nodes[GPU].count, nn = sys->nodes[NET].count;
  if (text) {
    printf("Paths GPU->GPU (rank: type/bw GB/s):\n       ");
    for (int j = 0; j < ng; j++) printf("  rank%-8d", sys->nodes[GPU].nodes[j].gpu.rank);
    printf("\n");
  }
  o << "{\"gpu_gpu\":[";
  for (int i = 0; i < ng; i++) {
    struct ncclTopoNode* gi = sys->nodes[GPU].nodes + i;
    if (text) printf("  rank%-2d", gi->gpu.rank);
    o << (i ? "," : "") << "{\"from\":" << gi->gpu.rank << ",\"to\":[";
    for (int j = 0; j < ng; j++) {
      struct ncclTopoLinkList* p = gi->paths[GPU] + j;
      if (text) printf("  %3s/%-8.1f", pathStr(p->type), p->bw);
      o << (j ? "," : "") << "{\"rank\":" << sys->nodes[GPU].nodes[j].gpu.rank << ",\"type\":\"" << pathStr(p->type)
        << "\",\"bw\":" << p->bw << ",\"hops\":" << p->count << "}";
    }
    if (text) printf("\n");
    o << "]}";
  }
  o << "],\"gpu_net\":[";
  if (text && nn) {
    printf("Paths GPU->NET (type/bw GB/s):\n       ");
    for (int n = 0; n < nn; n++) printf("  %-14.14s", netName(sys, sys->nodes[NET].nodes[n].id).c_str());
    printf("\n");
  }
  for (int i = 0; i < ng && nn; i++) {
    struct ncclTopoNode* gi = sys->nodes[GPU].nodes + i;
    if (text) printf("  rank%-2d", gi->gpu.rank);
    o << (i ? "," : "") << "{\"from\":" << gi->gpu.rank << ",\"to\":[";
    for (int n = 0; n < nn; n++) {
      struct ncclTopoLinkList* p = gi->paths[NET] + n;
      if (text) printf("  %3s/%-10.1f", pathStr(p->type), p->bw);
      o << (n ? "," : "") << "{\"net\":" << jsonStr(netName(sys, sys->nodes[NET].nodes[n].id)) << ",\"type\":\""
        << pathStr(p->type) << "\",\"bw\":" << p->bw << "}";
    }
    if (text) printf("\n");
    o << "]}";
  }
  o << "]}";
  return o.str();
}

/******************************** main ********************************/
static void usage() {
  fprintf(stderr,
          "usage: ncclsim [options] TOPO.xml\n"
          "  Runs NCCL %d.%d.%d's own topology/graph/tuning code on the machine described by TOPO.xml.\n"
          "  --nodes N          identical nodes (default 1)\n"
          "  --gpus LIST        GPU indices to use, e.g. 0,1,2,3 or 0-3 (default: all)\n"
          "  --size BYTES[,..]  all_reduce sizes for the tuning model (default 8,65536,1048576,16777216,268435456,"
          "4294967296; k/M/G suffixes)\n"
          "  --sm N             compute capability for GPUs the XML does not give (default: from PCI id, else 80)\n"
          "  --nic-speed GBPS   speed of NICs the XML gives no <net> for (default 100)\n"
          "  --no-gdr           NICs without <net> info have no GPU Direct RDMA\n"
          "  --no-merge-nics    network plugin without makeVDevice (no NIC fusion)\n"
          "  --nvls 0|1         NVLS multicast support (default: sm90+ with an NVSwitch)\n"
          "  --mnnvl-clique K   GPUs report NVML fabric info: NVLink clique = K consecutive nodes (hosts)\n"
          "  --mnnvl-domain M   nodes per NVLink domain (fabric cluster UUID), a multiple of K (default K)\n"
          "  --fabric-state S   NVML fabric state of every GPU (default 3, completed)\n"
          "  --mnnvl-full       every rank of a clique builds and searches its own system (default: ranks whose\n"
          "                     fresh system is rank 0's take over rank 0's paths and graphs)\n"
          "  --paths            print GPU->GPU and GPU->NET paths\n"
          "  --json             JSON output\n"
          "  --verbose          also print NCCL's topology (ncclTopoPrint needs NCCL_DEBUG=INFO)\n"
          "  NCCL_* environment variables are honoured (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH,TUNING, ...)\n",
          NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'k': case 'K': v *= 1024; break;
  case 'm': case 'M': v *= 1024 * 1024; break;
  case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
  }
  return (size_t)v;
}

int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024); // fixed: freed systems go back to the OS
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { usage(); exit(2); }
      return argv[++i];
    };
    if (a == "--nodes" || a == "-N") opt.nodes = atoi(next());
    else if (a == "--gpus") {
      std::string s = next();
      std::stringstream ss(s);
      std::string tok;
      while (std::getline(ss, tok, ',')) {
        size_t dash = tok.find('-');
        if (dash != std::string::npos) {
          for (int g = atoi(tok.substr(0, dash).c_str()); g <= atoi(tok.substr(dash + 1).c_str()); g++)
            opt.gpuSel.push_back(g);
        } else opt.gpuSel.push_back(atoi(tok.c_str()));
      }
    } else if (a == "--size") {
      std::string s = next();
      std::stringstream ss(s);
      std::string tok;
      while (std::getline(ss, tok, ',')) opt.sizes.push_back(parseSize(tok.c_str()));
    } else if (a == "--sm") opt.sim.smOverride = atoi(next());
    else if (a == "--nic-speed") opt.sim.nicSpeedMbps = (int)(atof(next()) * 1000);
    else if (a == "--no-gdr") opt.sim.gdr = false;
    else if (a == "--no-merge-nics") opt.sim.mergeNics = false;
    else if (a == "--nvls") opt.nvls = atoi(next());
    else if (a == "--mnnvl-clique") opt.clique = atoi(next());
    else if (a == "--mnnvl-domain") opt.domain = atoi(next());
    else if (a == "--fabric-state") opt.fabricState = atoi(next());
    else if (a == "--mnnvl-full") opt.mnnvlFull = true;
    else if (a == "--paths") opt.paths = true;
    else if (a == "--json") opt.json = true;
    else if (a == "--verbose") opt.verbose = true;
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else if (a[0] == '-') { fprintf(stderr, "ncclsim: unknown option %s\n", a.c_str()); usage(); return 2; }
    else opt.xml = argv[i];
  }
  if (!opt.xml || opt.nodes < 1) { usage(); return 2; }
  if (opt.sizes.empty())
    opt.sizes = {8, 65536, 1 << 20, 16 << 20, 256 << 20, (size_t)4 << 30};
  struct stat st;
  if (stat(opt.xml, &st) != 0) { fprintf(stderr, "ncclsim: cannot open %s\n", opt.xml); return 2; }

  std::string err;
  if (simMachineLoad(opt.xml, opt.sim, &err)) { fprintf(stderr, "ncclsim: %s\n", err.c_str()); return 1; }
  if (simGpuCount() == 0) { fprintf(stderr, "ncclsim: no GPU (PCI class 0x03) in %s\n", opt.xml); return 1; }
  if (opt.gpuSel.empty()) for (int i = 0; i < simGpuCount(); i++) gpuOfLocal.push_back(i);
  else {
    for (int idx : opt.gpuSel) {
      int found = -1;
      for (int i = 0; i < simGpuCount(); i++) if (simGpu(i)->nvmlIndex == idx) found = i;
      if (found < 0) { fprintf(stderr, "ncclsim: no GPU %d in %s\n", idx, opt.xml); return 2; }
      gpuOfLocal.push_back(found);
    }
  }
  G = gpuOfLocal.size();
  NR = G * opt.nodes;
  setenv("NCCL_TOPO_FILE", opt.xml, 1);

  // Peers (all ranks), then the MNNVL check: with MNNVL the ranks run as threads are rank 0's clique.
  if (opt.clique > 0) {
    if (opt.domain <= 0) opt.domain = opt.clique;
    if (opt.nodes % opt.clique != 0 || opt.domain % opt.clique != 0) {
      fprintf(stderr, "ncclsim: --nodes and --mnnvl-domain must be multiples of --mnnvl-clique\n");
      return 2;
    }
  }
  std::vector<struct ncclPeerInfo> peerTemplate(NR);
  std::vector<struct ncclComm*> localComms(NR, (struct ncclComm*)NULL);
  fillPeerInfo(peerTemplate.data(), localComms.data());
  std::vector<int> clique;
  int cliqueRank0 = 0;
  mnnvl = mnnvlCheck(peerTemplate.data(), 0, &clique, &cliqueRank0, &nvlDomainSize);
  L = G;
  if (mnnvl) {
    // every rank's clique has rank 0's size and is a block of consecutive hosts (checked below)
    L = clique.size();
    for (size_t i = 0; i < clique.size(); i++)
      if (clique[i] != (int)i) { fprintf(stderr, "ncclsim: rank 0's clique is not ranks 0..%d\n", L - 1); return 2; }
    if (NR % L != 0 || L % G != 0) { fprintf(stderr, "ncclsim: cliques of %d ranks do not divide %d ranks\n", L, NR); return 2; }
    cliqueId0 = peerTemplate[0].fabricInfo.cliqueId;
  }

  // Ranks run here: one comm and one thread each.
  std::vector<RankCtx> ctx(L);
  for (int l = 0; l < L; l++) {
    if (ncclCalloc(&localComms[l], 1) != ncclSuccess) return 1;
    ctx[l].comm = localComms[l];
  }
  fillPeerInfo(peerTemplate.data(), localComms.data());
  for (int l = 0; l < L; l++) {
    std::vector<int> cl;
    int cr = 0, ds = 0;
    if (mnnvl) {
      if (!mnnvlCheck(peerTemplate.data(), l, &cl, &cr, &ds) || (int)cl.size() != L || cl[0] != 0 || ds != nvlDomainSize) {
        fprintf(stderr, "ncclsim: rank %d sees another clique than rank 0\n", l);
        return 2;
      }
    }
    if (commSetup(localComms[l], l, peerTemplate.data(), cl) != ncclSuccess) return 1;
  }
  std::vector<pthread_t> th(L);
  for (int l = 0; l < L; l++) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 20);
    pthread_create(&th[l], &attr, rankThread, &ctx[l]);
  }
  for (int l = 0; l < L; l++) pthread_join(th[l], NULL);
  for (int l = 0; l < L; l++) {
    if (ctx[l].ret != ncclSuccess) {
      fprintf(stderr, "ncclsim: rank %d failed (%s)\n", l, ncclGetErrorString(ctx[l].ret));
      return 1;
    }
  }

  // All-gather 3: other nodes (cliques) are copies of this one.
  std::vector<struct allGatherInfo> allGather3Data(NR);
  for (int r = 0; r < NR; r++) {
    allGather3Data[r] = ctx[r % L].ag;
    if (r >= L) shiftTopoRanks(&allGather3Data[r].topoRanks, (r / L) * L);
  }

  // Rank 0: the rest of initTransportsRank up to the tuning model.
  struct ncclComm* comm = localComms[0];
  int rank = 0, nranks = NR;
  struct ncclTopoGraph* ringGraph = &comm->graphs[NCCL_ALGO_RING];
  struct ncclTopoGraph* treeGraph = &comm->graphs[NCCL_ALGO_TREE];
  struct ncclTopoGraph* nvlsGraph = &comm->graphs[NCCL_ALGO_NVLS];
  struct ncclTopoGraph* graphs[NCCL_NUM_ALGORITHMS] = {treeGraph, ringGraph, &comm->graphs[NCCL_ALGO_COLLNET_DIRECT],
                                                       &comm->graphs[NCCL_ALGO_COLLNET_CHAIN], nvlsGraph, nvlsGraph,
                                                       treeGraph};
  // Graphs as searched on rank 0, kept for printing.
  struct ncclTopoGraph* searched = (struct ncclTopoGraph*)malloc(sizeof(struct ncclTopoGraph) * 3);
  searched[0] = *ringGraph;
  searched[1] = *treeGraph;
  searched[2] = *nvlsGraph;
  int nvlsSearched = comm->nvlsSupport;
  bool graphsDiffer = false;
  for (int l = 1; l < L; l++) {
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
      struct graphInfo* x = &ctx[l].ag.graphInfo[a];
      struct graphInfo* y = &ctx[0].ag.graphInfo[a];
      if (x->nChannels != y->nChannels || x->bwIntra != y->bwIntra || x->bwInter != y->bwInter) graphsDiffer = true;
    }
  }

  int* nodesFirstRank = (int*)calloc(nranks, sizeof(int));
  int* nodesTreePatterns = (int*)calloc(nranks, sizeof(int));
  comm->rankToNode = (int*)calloc(nranks, sizeof(int));
  comm->minNetCount = INT_MAX;
  comm->nNodes = 0;
  for (int r = 0; r < nranks; r++) {
    int node;
    int firstRank = allGather3Data[r].topoRanks.ringRecv[0];
    for (node = 0; node < comm->nNodes && nodesFirstRank[node] != firstRank; node++);
    if (node == comm->nNodes) {
      comm->nNodes++;
      nodesFirstRank[node] = firstRank;
      nodesTreePatterns[node] = allGather3Data[r].graphInfo[NCCL_ALGO_TREE].pattern;
    }
    comm->rankToNode[r] = node;
    if (comm->cpuArch != allGather3Data[r].cpuArch && comm->cpuArch != NCCL_TOPO_CPU_ARCH_MIXED)
      comm->cpuArch = NCCL_TOPO_CPU_ARCH_MIXED;
    if (comm->cpuVendor != allGather3Data[r].cpuVendor && comm->cpuVendor != NCCL_TOPO_CPU_VENDOR_MIXED)
      comm->cpuVendor = NCCL_TOPO_CPU_VENDOR_MIXED;
    if (!allGather3Data[r].isAllNvlink) comm->isAllNvlink = 0;
    comm->minNetCount = std::min(comm->minNetCount, allGather3Data[r].localNetDeviceBw);
  }
  comm->nodeRanks = (struct ncclNodeRanks*)calloc(comm->nNodes, sizeof(struct ncclNodeRanks));
  comm->rankToLocalRank = (int*)calloc(nranks, sizeof(int));
  for (int r = 0; r < nranks; r++) {
    int node = comm->rankToNode[r];
    comm->rankToLocalRank[r] = comm->nodeRanks[node].localRanks;
    comm->nodeRanks[node].localRanks++;
  }
  comm->minLocalRanks = INT_MAX;
  for (int n = 0; n < comm->nNodes; n++) {
    comm->nodeRanks[n].localRankToRank = (int*)calloc(comm->nodeRanks[n].localRanks, sizeof(int));
    comm->maxLocalRanks = std::max(comm->maxLocalRanks, comm->nodeRanks[n].localRanks);
    comm->minLocalRanks = std::min(comm->minLocalRanks, comm->nodeRanks[n].localRanks);
    comm->nodeRanks[n].localRanks = 0;
  }
  for (int r = 0; r < nranks; r++) {
    int node = comm->rankToNode[r];
    comm->nodeRanks[node].localRankToRank[comm->nodeRanks[node].localRanks++] = r;
  }
  comm->node = comm->rankToNode[rank];
  comm->localRankToRank = comm->nodeRanks[comm->node].localRankToRank;
  comm->localRank = comm->rankToLocalRank[rank];
  comm->localRanks = comm->nodeRanks[comm->node].localRanks;

  int nChannelsOrig = comm->nChannels;
  comm->minNetBw = allGather3Data[rank].minNetBw;
  struct ncclTopoRanks** allTopoRanks = (struct ncclTopoRanks**)calloc(nranks, sizeof(struct ncclTopoRanks*));
  for (int i = 0; i < nranks; i++) {
    allTopoRanks[i] = &allGather3Data[i].topoRanks;
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
      graphs[a]->nChannels = std::min(allGather3Data[i].graphInfo[a].nChannels, graphs[a]->nChannels);
      graphs[a]->sameChannels = std::min(allGather3Data[i].graphInfo[a].sameChannels, graphs[a]->sameChannels);
      graphs[a]->bwIntra = std::min(allGather3Data[i].graphInfo[a].bwIntra, graphs[a]->bwIntra);
      graphs[a]->bwInter = std::min(allGather3Data[i].graphInfo[a].bwInter, graphs[a]->bwInter);
      graphs[a]->typeIntra = std::max(allGather3Data[i].graphInfo[a].typeIntra, graphs[a]->typeIntra);
      graphs[a]->typeInter = std::max(allGather3Data[i].graphInfo[a].typeInter, graphs[a]->typeInter);
      graphs[a]->crossNic = std::max(allGather3Data[i].graphInfo[a].crossNic, graphs[a]->crossNic);
    }
    comm->maxTreePattern = std::max(comm->maxTreePattern, allGather3Data[i].graphInfo[NCCL_ALGO_TREE].pattern);
    comm->p2pnChannelsPerPeer = std::min(comm->p2pnChannelsPerPeer, allGather3Data[i].p2pnChannelsPerPeer);
    comm->p2pMaxPeers = std::max(comm->p2pMaxPeers, allGather3Data[i].p2pMaxPeers);
    comm->minNetBw = std::min(comm->minNetBw, allGather3Data[i].minNetBw);
  }
  if (graphs[NCCL_ALGO_COLLNET_CHAIN]->nChannels == 0) comm->config.collnetEnable = 0;
  if (graphs[NCCL_ALGO_NVLS]->nChannels == 0) comm->nvlsSupport = comm->nvlsChannels = 0;
  if (comm->nvlsSupport) CHECK(ncclNvlsTuning(comm));

  comm->nChannels = treeGraph->nChannels = ringGraph->nChannels = std::min(treeGraph->nChannels, ringGraph->nChannels);
  if (comm->nChannels < nChannelsOrig) {
    for (int i = 0; i < comm->nChannels; i++)
      memcpy(comm->channels + comm->nChannels + i, comm->channels + nChannelsOrig + i, sizeof(struct ncclChannel));
  }
  comm->isOneRPN = (comm->maxLocalRanks == 1);
  int* rings = (int*)calloc((size_t)nranks * MAXCHANNELS, sizeof(int));
  CHECK(ncclTopoPostset(comm, nodesFirstRank, nodesTreePatterns, allTopoRanks, rings, graphs, NULL));

  CHECK(ncclTopoInitTunerConstants(comm));
  CHECK(ncclTopoTuneModel(comm, comm->minCompCap, comm->maxCompCap, graphs));

  /******************************** output ********************************/
  struct ncclTopoSystem* sys = comm->topo;
  bool text = !opt.json;
  std::ostringstream js;
  js << "{\"nccl_version\":\"" << NCCL_MAJOR << "." << NCCL_MINOR << "." << NCCL_PATCH << "\",\"xml\":"
     << jsonStr(opt.xml) << ",\"nodes\":" << opt.nodes << ",\"nRanks\":" << NR << ",\"localRanks\":" << G;
  if (text) {
    printf("ncclsim (NCCL %d.%d.%d graph code) %s\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, opt.xml);
    printf("nodes %d, ranks %d (%d per node), nNodes seen by NCCL %d\n", opt.nodes, NR, G, comm->nNodes);
  }
  if (mnnvl) {
    if (text)
      printf("MNNVL 1 cliqueId %x cliqueSize %d nvlDomainSize %d: ranks 0-%d (%d hosts) share one NVLink system\n",
             cliqueId0, L, nvlDomainSize, L - 1, L / G);
    js << ",\"mnnvl\":{\"MNNVL\":1,\"cliqueId\":" << cliqueId0 << ",\"cliqueSize\":" << L << ",\"nvlDomainSize\":"
       << nvlDomainSize << ",\"hosts\":" << L / G << "}";
  }
  js << ",\"gpus\":[";
  for (int l = 0; l < L; l++) {
    const SimGpu* g = simGpu(gpuOfLocal[l % G]);
    if (text)
      printf("  rank %d: host %d GPU %d busId %s sm%d (sm from %s)\n", l, l / G, g->nvmlIndex, g->busId.c_str(), g->sm,
             g->smFrom);
    js << (l ? "," : "") << "{\"rank\":" << l << ",\"host\":" << l / G << ",\"gpu\":" << g->nvmlIndex
       << ",\"busId\":" << jsonStr(g->busId) << ",\"sm\":" << g->sm << ",\"smFrom\":\"" << g->smFrom << "\"}";
  }
  js << "],\"nets\":[";
  for (int n = 0; n < sys->nodes[NET].count; n++) {
    struct ncclTopoNode* net = sys->nodes[NET].nodes + n;
    std::string nm = netName(sys, net->id);
    if (text)
      printf("  NET %d: dev %d %s bw %.1f GB/s port %d gdr %d\n", n, net->net.dev, nm.c_str(), net->net.bw,
             net->net.port, net->net.gdrSupport);
    js << (n ? "," : "") << "{\"dev\":" << net->net.dev << ",\"name\":" << jsonStr(nm) << ",\"bw\":" << net->net.bw
       << ",\"gdr\":" << net->net.gdrSupport << "}";
  }
  js << "],\"notes\":[";
  {
    int k = 0;
    for (auto& s : simMachineNotes()) {
      if (text) printf("note: %s\n", s.c_str());
      js << (k++ ? "," : "") << jsonStr(s);
    }
    if (graphsDiffer) {
      if (text) printf("note: local ranks found different graphs (cross-rank minimum applied)\n");
      js << (k++ ? "," : "") << jsonStr("local ranks found different graphs");
    }
  }
  js << "],\"system\":{\"maxBw\":" << sys->maxBw << ",\"totalBw\":" << sys->totalBw << ",\"inter\":" << sys->inter
     << ",\"cpuArch\":" << comm->cpuArch << ",\"cpuVendor\":" << comm->cpuVendor << "}";
  if (text) printf("system: maxBw %.2f totalBw %.2f inter %d\n", sys->maxBw, sys->totalBw, sys->inter);
  if (opt.paths || opt.json) js << ",\"paths\":" << pathsJson(sys, text && opt.paths);
  js << ",\"graphs\":{\"ring\":" << graphJson(sys, &searched[0], "ring", text)
     << ",\"tree\":" << graphJson(sys, &searched[1], "tree", text);
  if (nvlsSearched) js << ",\"nvls\":" << graphJson(sys, &searched[2], "nvls", text);
  else if (text) printf("nvls: not supported (no NVLS search)\n");
  js << "}";

  // Channels after ncclTopoPostset
  if (text) {
    printf("comm: nChannels %d (collChannels %d), nvlsSupport %d nvlsChannels %d, ring graph %d x %.2f GB/s, "
           "tree graph %d x %.2f GB/s\n",
           comm->nChannels, comm->collChannels, comm->nvlsSupport, comm->nvlsChannels, ringGraph->nChannels,
           ringGraph->bwIntra, treeGraph->nChannels, treeGraph->bwIntra);
    printf("  ring 0 (ranks): ");
    for (int i = 0; i < nranks; i++) printf("%d ", rings[i]);
    printf("\n");
  }
  js << ",\"comm\":{\"nChannels\":" << comm->nChannels << ",\"collChannels\":" << comm->collChannels
     << ",\"nvlsSupport\":" << comm->nvlsSupport << ",\"nvlsChannels\":" << comm->nvlsChannels
     << ",\"nNodes\":" << comm->nNodes << ",\"rings\":[";
  for (int c = 0; c < comm->nChannels; c++) {
    js << (c ? "," : "") << "[";
    for (int i = 0; i < nranks; i++) js << (i ? "," : "") << rings[c * nranks + i];
    js << "]";
  }
  js << "],\"trees\":[";
  for (int c = 0; c < comm->nChannels; c++) {
    struct ncclTree* t = &comm->channels[c].tree;
    js << (c ? "," : "") << "{\"up\":" << t->up << ",\"down\":[" << t->down[0] << "," << t->down[1] << ","
       << t->down[2] << "]}";
  }
  js << "]}";

  // Tuning model: bandwidth/latency table and the algorithm chosen for all_reduce.
  js << ",\"tuning\":{\"allreduce\":{";
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
    js << (a ? "," : "") << "\"" << ncclAlgoStr[a] << "\":{";
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
      js << (p ? "," : "") << "\"" << ncclProtoStr[p] << "\":[" << comm->latencies[ncclFuncAllReduce][a][p] << ","
         << comm->bandwidths[ncclFuncAllReduce][a][p] << "]";
    js << "}";
  }
  js << "}},\"allreduce\":[";
  if (text) printf("all_reduce (float, sum): size -> algo/proto, channels, warps, predicted time (us), busbw (GB/s)\n");
  for (size_t s = 0; s < opt.sizes.size(); s++) {
    size_t bytes = opt.sizes[s];
    struct ncclTaskColl task;
    memset(&task, 0, sizeof(task));
    task.func = ncclFuncAllReduce;
    task.count = bytes / sizeof(float);
    task.datatype = ncclFloat32;
    task.opHost = ncclSum;
    task.opDev.op = ncclDevSum;
    ncclSimInfo_t simInfo = NCCL_SIM_INFO_INITIALIZER;
    int nvlsSupport = comm->nvlsSupport; // ncclNvlsSupported(sum, float32) is true
    ncclResult_t r = ncclGetAlgoInfo(comm, &task, /*collNetSupport=*/0, nvlsSupport, /*numPipeOps=*/1, &simInfo);
    if (r != ncclSuccess) {
      fprintf(stderr, "ncclsim: ncclGetAlgoInfo failed for %zu bytes\n", bytes);
      return 1;
    }
    float t = simInfo.estimatedTime;
    double busbw = t > 0 ? (double)bytes * 2.0 * (NR - 1) / NR / (t * 1e3) : 0;
    // all algorithm/protocol times
    std::ostringstream alt;
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
      for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
        float tt;
        ncclTopoGetAlgoTime(comm, ncclFuncAllReduce, a, p, bytes, 1, &tt);
        if (tt < 0) continue;
        if (alt.tellp() > 0) alt << ",";
        alt << "\"" << ncclAlgoStr[a] << "/" << ncclProtoStr[p] << "\":" << tt;
      }
    if (text)
      printf("  %12zu B -> %s/%s, %d ch, %d warps, %.2f us, busbw %.2f GB/s\n", bytes, ncclAlgoStr[task.algorithm],
             ncclProtoStr[task.protocol], task.nMaxChannels, task.nWarps, t, busbw);
    js << (s ? "," : "") << "{\"bytes\":" << bytes << ",\"algo\":\"" << ncclAlgoStr[task.algorithm] << "\",\"proto\":\""
       << ncclProtoStr[task.protocol] << "\",\"nChannels\":" << task.nMaxChannels << ",\"nWarps\":" << task.nWarps
       << ",\"time_us\":" << t << ",\"busbw\":" << busbw << ",\"all\":{" << alt.str() << "}}";
  }
  js << "]";
  for (int fn = 0; fn < 2; fn++) {
    ncclFunc_t func = fn == 0 ? ncclFuncAllGather : ncclFuncReduceScatter;
    js << ",\"" << (fn == 0 ? "allgather" : "reducescatter") << "\":[";
    for (size_t s = 0; s < opt.sizes.size(); s++) {
      size_t bytes = opt.sizes[s];
      struct ncclTaskColl task;
      memset(&task, 0, sizeof(task));
      task.func = func;
      task.count = bytes / sizeof(float) / NR;
      task.datatype = ncclFloat32;
      task.opHost = ncclSum;
      task.opDev.op = ncclDevSum;
      ncclSimInfo_t simInfo = NCCL_SIM_INFO_INITIALIZER;
      ncclResult_t r = ncclGetAlgoInfo(comm, &task, /*collNetSupport=*/0, comm->nvlsSupport, /*numPipeOps=*/1, &simInfo);
      if (r != ncclSuccess) { fprintf(stderr, "ncclsim: ncclGetAlgoInfo failed for %zu bytes\n", bytes); return 1; }
      js << (s ? "," : "") << "{\"bytes\":" << bytes << ",\"algo\":\"" << ncclAlgoStr[task.algorithm]
         << "\",\"proto\":\"" << ncclProtoStr[task.protocol] << "\",\"nChannels\":" << task.nMaxChannels
         << ",\"nWarps\":" << task.nWarps << ",\"time_us\":" << simInfo.estimatedTime << "}";
    }
    js << "]";
  }
  js << "}";
  if (opt.json) printf("%s\n", js.str().c_str());
  return 0;
}
