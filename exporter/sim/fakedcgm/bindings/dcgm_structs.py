"""Fake DCGM bindings (simulator): ``dcgm_structs``, status codes, errors, structs, library load.

Written for gpushare-exporter's simulator. Names, numbers, struct layouts and the error
class scheme follow the module DCGM ships (shared/reference/dcgm_k8s_facts.md part A), so
that exporter/backend/dcgm*.py runs unchanged on the real bindings:

- every DCGM_ST_* code has an exception class ``DCGMError_<CamelCase suffix>`` (a subclass
  of DCGMError carrying ``.value``), and ``DCGMError(code)`` builds the right subclass;
- ``_dcgmInit(libDcgmPath)`` "loads the library": here, the simulated host engine that
  exporter.sim.fakedcgm.install() registered; none registered -> DCGMError_LibraryNotFound;
- ``_dcgmGetFunctionPointer(name)`` looks a C symbol up on that library once and caches it by
  name (as the real module does); a symbol the simulated DCGM version lacks ->
  DCGMError_FunctionNotFound (not cached);
- struct fields holding C strings read back as ``str``, as in the real bindings.
"""

import threading
from ctypes import (
    Structure, Union, c_byte, c_char, c_double, c_int, c_int64, c_short, c_uint, c_uint32, c_ushort, sizeof,
)

DCGM_MAX_STR_LENGTH = 256
DCGM_MAX_NUM_DEVICES = 32
DCGM_MAX_BLOB_LENGTH = 4096
DCGM_MAX_INSTANCES_PER_GPU = 8
DCGM_MAX_TOTAL_INSTANCES = 14
DCGM_MAX_HIERARCHY_INFO = DCGM_MAX_NUM_DEVICES * DCGM_MAX_TOTAL_INSTANCES
DCGM_GROUP_MAX_ENTITIES_V2 = 1024
DCGM_PROF_MAX_NUM_GROUPS_V2 = 10
DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2 = 64

DCGM_OPERATION_MODE_AUTO = 1
DCGM_OPERATION_MODE_MANUAL = 2

DCGM_GROUP_DEFAULT = 0
DCGM_GROUP_EMPTY = 1
DCGM_GROUP_DEFAULT_INSTANCES = 3
DCGM_GROUP_DEFAULT_ENTITIES = 5
DCGM_GROUP_ALL_GPUS = 0x7FFFFFFF
DCGM_GROUP_ALL_INSTANCES = 0x7FFFFFFD
DCGM_GROUP_ALL_ENTITIES = 0x7FFFFFFB

DCGM_FV_FLAG_LIVE_DATA = 0x00000001

# Status codes (dcgm_structs.h) and the message each error prints.
_STATUS = (
    ("OK", 0, "Success"),
    ("BADPARAM", -1, "Bad parameter passed to function"),
    ("GENERIC_ERROR", -3, "Generic unspecified error"),
    ("MEMORY", -4, "Out of memory error"),
    ("NOT_CONFIGURED", -5, "Setting not configured"),
    ("NOT_SUPPORTED", -6, "Feature not supported"),
    ("INIT_ERROR", -7, "DCGM initialization error"),
    ("NVML_ERROR", -8, "NVML error"),
    ("PENDING", -9, "Object is in a pending state"),
    ("UNINITIALIZED", -10, "Object is in an undefined state"),
    ("TIMEOUT", -11, "Timeout"),
    ("VER_MISMATCH", -12, "API version mismatch"),
    ("UNKNOWN_FIELD", -13, "Unknown field"),
    ("NO_DATA", -14, "No data is available"),
    ("STALE_DATA", -15, "Data is considered stale"),
    ("NOT_WATCHED", -16, "Field is not being updated"),
    ("NO_PERMISSION", -17, "Not permissioned"),
    ("GPU_IS_LOST", -18, "GPU is unreachable"),
    ("RESET_REQUIRED", -19, "GPU requires a reset"),
    ("FUNCTION_NOT_FOUND", -20, "Unable to find function"),
    ("CONNECTION_NOT_VALID", -21, "The connection to the host engine is not valid any longer"),
    ("GPU_NOT_SUPPORTED", -22, "This GPU is not supported by DCGM"),
    ("GROUP_INCOMPATIBLE", -23, "GPUs are incompatible with each other for the requested operation"),
    ("MAX_LIMIT", -24, "Max limit reached for the object"),
    ("LIBRARY_NOT_FOUND", -25, "DCGM library could not be found"),
    ("DUPLICATE_KEY", -26, "Duplicate key passed to function"),
    ("REQUIRES_ROOT", -29, "This operation is not supported when the host engine is running as non root"),
    ("INSUFFICIENT_SIZE", -31, "An input argument is not large enough"),
    ("FIELD_UNSUPPORTED_BY_API", -32, "The given field ID is not supported by the API being called"),
    ("MODULE_NOT_LOADED", -33, "This request is serviced by a module of DCGM that is not currently loaded"),
    ("IN_USE", -34, "The requested operation could not be completed because the affected resource is in use"),
    ("GROUP_IS_EMPTY", -35, "The specified group is empty, and this operation is incompatible with an empty group"),
    ("PROFILING_NOT_SUPPORTED", -36, "Profiling is not supported for this group of GPUs or GPU"),
    ("PROFILING_LIBRARY_ERROR", -37, "The third-party Profiling module returned an unrecoverable error"),
    ("PROFILING_MULTI_PASS", -38, "The requested profiling metrics cannot be collected in a single pass"),
    ("INSUFFICIENT_DRIVER_VERSION", -44, "The installed driver version is insufficient for this API"),
    ("INSTANCE_NOT_FOUND", -45, "The specified GPU instance does not exist"),
    ("COMPUTE_INSTANCE_NOT_FOUND", -46, "The specified GPU compute instance does not exist"),
    ("PAUSED", -54, "The hostengine and all modules are paused"),
    ("ALREADY_INITIALIZED", -55, "The object is already initialized"),
    ("NVML_NOT_LOADED", -56, "NVML couldn't be loaded on this system"),
    ("NVML_DRIVER_TIMEOUT", -57, "NVML driver timeout error was detected"),
)
for _suffix, _code, _ in _STATUS:
    globals()["DCGM_ST_" + _suffix] = _code


class DCGMError(Exception):
    """A DCGM call failed; ``value`` is the DCGM_ST_* code. ``DCGMError(code)`` returns the
    subclass for that code (e.g. DCGMError_ConnectionNotValid) when there is one."""

    _valClassMapping = {}
    _error_code_to_string = {code: text for _, code, text in _STATUS}

    def __new__(cls, value):
        if cls is DCGMError:
            cls = DCGMError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        obj.info = None
        return obj

    def __init__(self, value=None):
        Exception.__init__(self, self.value)

    def __str__(self):
        text = self._error_code_to_string.get(self.value, "DCGM Error with code %d" % self.value)
        return text if self.info is None else "%s: '%s'" % (text.rstrip("."), self.info)

    def __eq__(self, other):
        return isinstance(other, DCGMError) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def SetAdditionalInfo(self, msg):
        self.info = msg


def _class_name(suffix):
    return "DCGMError_" + "".join(part.capitalize() for part in suffix.split("_"))


def _make_error_class(code):
    def new(cls, value=None):
        return DCGMError.__new__(cls, code)
    return new


for _suffix, _code, _ in _STATUS:
    if _code == 0:
        continue
    _cls = type(_class_name(_suffix), (DCGMError,), {"__new__": _make_error_class(_code)})
    _cls.__module__ = __name__
    globals()[_cls.__name__] = _cls
    DCGMError._valClassMapping[_code] = _cls


def dcgmExceptionClass(error_code):
    """The exception class for DCGM_ST_* ``error_code`` (for ``except`` clauses)."""
    return DCGMError._valClassMapping.get(error_code)


def _dcgmCheckReturn(ret):
    if ret != DCGM_ST_OK:
        raise DCGMError(ret)
    return ret


# --- structures ---------------------------------------------------------------------------


def _decoded(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _DcgmStructure(Structure):
    """C strings read back as str; str assigned to a char array is encoded."""

    def __getattribute__(self, key):
        return _decoded(super().__getattribute__(key))

    def __setattr__(self, key, value):
        super().__setattr__(key, value.encode("utf-8") if isinstance(value, str) else value)


class DcgmUnion(Union):
    def __getattribute__(self, key):
        return _decoded(super().__getattribute__(key))

    def __setattr__(self, key, value):
        super().__setattr__(key, value.encode("utf-8") if isinstance(value, str) else value)


_PrintableStructure = _DcgmStructure


def make_dcgm_version(struct, ver):
    return sizeof(struct) | (ver << 24)


class c_dcgmConnectV2Params_v2(_PrintableStructure):
    _fields_ = [("version", c_uint), ("persistAfterDisconnect", c_uint), ("timeoutMs", c_uint),
                ("addressIsUnixSocket", c_uint)]


c_dcgmConnectV2Params_version2 = make_dcgm_version(c_dcgmConnectV2Params_v2, 2)
c_dcgmConnectV2Params_version = c_dcgmConnectV2Params_version2


class c_dcgmConnectV3Params_v1(_PrintableStructure):
    _fields_ = [("version", c_uint), ("persistAfterDisconnect", c_uint), ("timeoutMs", c_uint)]


c_dcgmConnectV3Params_version1 = make_dcgm_version(c_dcgmConnectV3Params_v1, 1)
c_dcgmConnectV3Params_version = c_dcgmConnectV3Params_version1


class c_dcgmGroupEntityPair_t(_PrintableStructure):
    _fields_ = [("entityGroupId", c_uint32), ("entityId", c_uint32)]

    def __eq__(self, other):
        return (self.entityGroupId, self.entityId) == (other.entityGroupId, other.entityId)


class c_dcgmMigEntityInfo_t(_PrintableStructure):
    _fields_ = [("gpuUuid", c_char * 128), ("nvmlGpuIndex", c_uint), ("nvmlInstanceId", c_uint),
                ("nvmlComputeInstanceId", c_uint), ("nvmlMigProfileId", c_uint),
                ("nvmlProfileSlices", c_uint)]


class c_dcgmMigHierarchyInfo_v2(_PrintableStructure):
    _fields_ = [("entity", c_dcgmGroupEntityPair_t), ("parent", c_dcgmGroupEntityPair_t),
                ("info", c_dcgmMigEntityInfo_t)]


class c_dcgmMigHierarchy_v2(_PrintableStructure):
    _fields_ = [("version", c_uint), ("count", c_uint),
                ("entityList", c_dcgmMigHierarchyInfo_v2 * DCGM_MAX_HIERARCHY_INFO)]


c_dcgmMigHierarchy_version2 = make_dcgm_version(c_dcgmMigHierarchy_v2, 2)


class c_dcgmDeviceIdentifiers_v1(_PrintableStructure):
    _fields_ = [("version", c_uint), ("brandName", c_char * DCGM_MAX_STR_LENGTH),
                ("deviceName", c_char * DCGM_MAX_STR_LENGTH), ("pciBusId", c_char * DCGM_MAX_STR_LENGTH),
                ("serial", c_char * DCGM_MAX_STR_LENGTH), ("uuid", c_char * DCGM_MAX_STR_LENGTH),
                ("vbios", c_char * DCGM_MAX_STR_LENGTH), ("inforomImageVersion", c_char * DCGM_MAX_STR_LENGTH),
                ("pciDeviceId", c_uint32), ("pciSubSystemId", c_uint32),
                ("driverVersion", c_char * DCGM_MAX_STR_LENGTH), ("virtualizationMode", c_uint32)]


class c_dcgmDevicePowerLimits_v1(_PrintableStructure):
    _fields_ = [("version", c_uint), ("curPowerLimit", c_uint), ("defaultPowerLimit", c_uint),
                ("enforcedPowerLimit", c_uint), ("minPowerLimit", c_uint), ("maxPowerLimit", c_uint)]


class c_dcgmDeviceAttributes_v3(_PrintableStructure):
    # The simulated engine fills identifiers and power limits; DCGM's struct has more members
    # (clock sets, thermals, memory, settings) that the exporter does not read.
    _fields_ = [("version", c_uint), ("powerLimits", c_dcgmDevicePowerLimits_v1),
                ("identifiers", c_dcgmDeviceIdentifiers_v1)]


dcgmDeviceAttributes_version3 = make_dcgm_version(c_dcgmDeviceAttributes_v3, 3)


class c_dcgmFieldValue_v1_value(DcgmUnion):
    _fields_ = [("i64", c_int64), ("dbl", c_double), ("str", c_char * DCGM_MAX_STR_LENGTH),
                ("blob", c_byte * DCGM_MAX_BLOB_LENGTH)]


class c_dcgmFieldValue_v1(_PrintableStructure):
    _fields_ = [("version", c_uint), ("fieldId", c_ushort), ("fieldType", c_short), ("status", c_int),
                ("ts", c_int64), ("value", c_dcgmFieldValue_v1_value)]


dcgmFieldValue_version1 = make_dcgm_version(c_dcgmFieldValue_v1, 1)


class c_dcgmFieldValue_v2(_PrintableStructure):
    _fields_ = [("version", c_uint), ("entityGroupId", c_uint), ("entityId", c_uint), ("fieldId", c_ushort),
                ("fieldType", c_short), ("status", c_int), ("unused", c_uint), ("ts", c_int64),
                ("value", c_dcgmFieldValue_v1_value)]


dcgmFieldValue_version2 = make_dcgm_version(c_dcgmFieldValue_v2, 2)


class c_dcgmProfMetricGroupInfo_v2(_PrintableStructure):
    _fields_ = [("majorId", c_ushort), ("minorId", c_ushort), ("numFieldIds", c_uint32),
                ("fieldIds", c_ushort * DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2)]


class c_dcgmProfGetMetricGroups_v3(_PrintableStructure):
    _fields_ = [("version", c_uint32), ("unused", c_uint32), ("gpuId", c_uint32), ("numMetricGroups", c_uint32),
                ("metricGroups", c_dcgmProfMetricGroupInfo_v2 * DCGM_PROF_MAX_NUM_GROUPS_V2)]


dcgmProfGetMetricGroups_version3 = make_dcgm_version(c_dcgmProfGetMetricGroups_v3, 3)


class c_dcgmVersionInfo_v2(_PrintableStructure):
    _fields_ = [("version", c_uint32), ("rawBuildInfoString", c_char * (DCGM_MAX_STR_LENGTH * 2))]


dcgmVersionInfo_version2 = make_dcgm_version(c_dcgmVersionInfo_v2, 2)
dcgmVersionInfo_version = dcgmVersionInfo_version2

# --- library --------------------------------------------------------------------------------

dcgmLib = None
libLoadLock = threading.Lock()
# Symbols looked up so far, by name, as the real module keeps them (its
# ``_dcgmGetFunctionPointer_cache``: filled on the first look-up under libLoadLock, read without
# it afterwards; NVIDIA/DCGM testing/python3/dcgm_structs.py). The real library is loaded once
# per process, so its cache never goes stale; a test process installs many simulations, so a
# library other than the bound one starts a new cache (a new dict: whoever kept the old one,
# as bench/dcgm_pairs.py does per side, keeps its symbols).
_dcgmGetFunctionPointer_cache = {}


def _LoadDcgmLibrary(libDcgmPath=None):
    """Bind the simulated host engine registered by exporter.sim.fakedcgm.install()."""
    global dcgmLib, _dcgmGetFunctionPointer_cache
    from exporter.sim.fakedcgm import registry  # the simulator's stand-in for libdcgm.so

    with libLoadLock:
        lib = registry.installed()
        if lib is not dcgmLib:
            _dcgmGetFunctionPointer_cache = {}
        dcgmLib = lib
    if dcgmLib is None:
        raise DCGMError(DCGM_ST_LIBRARY_NOT_FOUND)


def _dcgmInit(libDcgmPath=None):
    _LoadDcgmLibrary(libDcgmPath)


def _dcgmGetFunctionPointer(name):
    """The library's C symbol ``name``, cached by name after the first look-up (as the real one)."""
    cache = _dcgmGetFunctionPointer_cache
    if name in cache:
        return cache[name]
    with libLoadLock:
        lib = dcgmLib
        if lib is None:
            raise DCGMError(DCGM_ST_UNINITIALIZED)
        try:
            symbol = cache[name] = getattr(lib, name)
            return symbol
        except AttributeError:
            raise DCGMError(DCGM_ST_FUNCTION_NOT_FOUND) from None
