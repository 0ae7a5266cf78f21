// nsight_schema.h — the tables of an Nsight Systems SQLite export (`nsys export --type sqlite`) that
// the importer reads, as the import tests build their exports: one statement each, so that a test
// creates the tables it fills and the columns are written once.
#pragma once

namespace trainscope::testing::nsight {

inline constexpr const char* kStringIds = "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);\n";
inline constexpr const char* kKernel =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,\n"
    "  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,\n"
    "  gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,\n"
    "  staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, registersPerThread INTEGER);\n";
inline constexpr const char* kRuntime =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER,\n"
    "  correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);\n";
inline constexpr const char* kNvtx =
    "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER,\n"
    "  color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);\n";
inline constexpr const char* kMemcpy =
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,\n"
    "  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);\n";
inline constexpr const char* kThreadNames = "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);\n";
inline constexpr const char* kProcesses = "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);\n";
// The GPUs of the machine (id → model) and each process's CUDA device ids on them (Nsight Systems 2021.2+).
inline constexpr const char* kTargetInfoGpu =
    "CREATE TABLE TARGET_INFO_GPU (id INTEGER PRIMARY KEY, name TEXT, busLocation TEXT, totalMemory INTEGER,\n"
    "  smCount INTEGER, chipName TEXT, memoryBandwidth INTEGER);\n";
inline constexpr const char* kTargetInfoCudaDevice =
    "CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT,\n"
    "  numMultiprocessors INTEGER);\n";

}  // namespace trainscope::testing::nsight
