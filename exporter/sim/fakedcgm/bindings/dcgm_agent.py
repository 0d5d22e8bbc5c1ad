"""Fake DCGM bindings (simulator): ``dcgm_agent``, the Python wrappers of libdcgm's C API.

Written for gpushare-exporter's simulator. Each wrapper has the name, arguments and return
value of the one DCGM ships: it turns str arguments into bytes, looks the C symbol up with
``dcgm_structs._dcgmGetFunctionPointer``, passes ctypes arguments (``byref`` out-parameters,
caller-allocated arrays) and raises ``DCGMError_<code>`` on a non-zero status. The C side is
the simulated host engine (exporter.sim.fakedcgm.hostengine). Only the calls the exporter and
its checks use are here.
"""

import functools
from ctypes import byref, c_double, c_int, c_int32, c_int64, c_uint, c_uint16, c_uint32, c_void_p

import dcgm_fields
import dcgm_structs

dcgmFP = dcgm_structs._dcgmGetFunctionPointer


def ensure_byte_strings():
    """str arguments become UTF-8 bytes before the C call, as DCGM's wrappers do."""
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            args = tuple(a.encode("utf-8") if isinstance(a, str) else a for a in args)
            kwargs = {k: v.encode("utf-8") if isinstance(v, str) else v for k, v in kwargs.items()}
            return fn(*args, **kwargs)
        return wrapper
    return decorator


def _check(ret):
    dcgm_structs._dcgmCheckReturn(ret)
    return ret


@ensure_byte_strings()
def dcgmInit():
    handle = c_void_p()
    return _check(dcgmFP("dcgmInit")(byref(handle)))


@ensure_byte_strings()
def dcgmShutdown():
    return _check(dcgmFP("dcgmShutdown")())


@ensure_byte_strings()
def dcgmStartEmbedded(opMode):
    handle = c_void_p()
    _check(dcgmFP("dcgmStartEmbedded")(opMode, byref(handle)))
    return handle


@ensure_byte_strings()
def dcgmStopEmbedded(dcgm_handle):
    return _check(dcgmFP("dcgmStopEmbedded")(dcgm_handle))


@ensure_byte_strings()
def dcgmConnect_v2(ip_address, connectParams, version=dcgm_structs.c_dcgmConnectV2Params_version):
    connectParams.version = version
    handle = c_void_p()
    _check(dcgmFP("dcgmConnect_v2")(ip_address, byref(connectParams), byref(handle)))
    return handle


@ensure_byte_strings()
def dcgmConnect_v3(connection_string, connectParams, version=dcgm_structs.c_dcgmConnectV3Params_version):
    connectParams.version = version
    handle = c_void_p()
    _check(dcgmFP("dcgmConnect_v3")(connection_string, byref(connectParams), byref(handle)))
    return handle


@ensure_byte_strings()
def dcgmDisconnect(dcgm_handle):
    return _check(dcgmFP("dcgmDisconnect")(dcgm_handle))


def _gpu_id_list(symbol, dcgm_handle):
    count = c_uint()
    ids = (c_uint * dcgm_structs.DCGM_MAX_NUM_DEVICES)()
    _check(dcgmFP(symbol)(dcgm_handle, ids, byref(count)))
    return list(ids[0:int(count.value)])


@ensure_byte_strings()
def dcgmGetAllSupportedDevices(dcgm_handle):
    return _gpu_id_list("dcgmGetAllSupportedDevices", dcgm_handle)


@ensure_byte_strings()
def dcgmGetAllDevices(dcgm_handle):
    return _gpu_id_list("dcgmGetAllDevices", dcgm_handle)


@ensure_byte_strings()
def dcgmGetDeviceAttributes(dcgm_handle, gpuId, version=dcgm_structs.dcgmDeviceAttributes_version3):
    if version != dcgm_structs.dcgmDeviceAttributes_version3:
        _check(dcgm_structs.DCGM_ST_VER_MISMATCH)
    attributes = dcgm_structs.c_dcgmDeviceAttributes_v3()
    attributes.version = version
    _check(dcgmFP("dcgmGetDeviceAttributes")(dcgm_handle, c_int(gpuId), byref(attributes)))
    return attributes


@ensure_byte_strings()
def dcgmGetEntityGroupEntities(dcgm_handle, entityGroup, flags):
    capacity = dcgm_structs.DCGM_GROUP_MAX_ENTITIES_V2
    count = c_int32(capacity)
    ids = (c_uint32 * capacity)()
    _check(dcgmFP("dcgmGetEntityGroupEntities")(dcgm_handle, entityGroup, ids, byref(count), flags))
    return ids[0:int(count.value)]


@ensure_byte_strings()
def dcgmGetGpuInstanceHierarchy(dcgm_handle):
    hierarchy = dcgm_structs.c_dcgmMigHierarchy_v2()
    hierarchy.version = dcgm_structs.c_dcgmMigHierarchy_version2
    _check(dcgmFP("dcgmGetGpuInstanceHierarchy")(dcgm_handle, byref(hierarchy)))
    return hierarchy


@ensure_byte_strings()
def dcgmGroupCreate(dcgm_handle, type, groupName):
    group_id = c_void_p()
    _check(dcgmFP("dcgmGroupCreate")(dcgm_handle, type, groupName, byref(group_id)))
    return group_id


@ensure_byte_strings()
def dcgmGroupDestroy(dcgm_handle, group_id):
    return _check(dcgmFP("dcgmGroupDestroy")(dcgm_handle, group_id))


@ensure_byte_strings()
def dcgmGroupAddEntity(dcgm_handle, group_id, entityGroupId, entityId):
    return _check(dcgmFP("dcgmGroupAddEntity")(dcgm_handle, group_id, entityGroupId, entityId))


@ensure_byte_strings()
def dcgmFieldGroupCreate(dcgm_handle, fieldIds, fieldGroupName):
    group_id = c_void_p()
    ids = (c_uint16 * len(fieldIds))(*fieldIds)
    _check(dcgmFP("dcgmFieldGroupCreate")(dcgm_handle, c_int32(len(fieldIds)), byref(ids), fieldGroupName,
                                          byref(group_id)))
    return group_id


@ensure_byte_strings()
def dcgmFieldGroupDestroy(dcgm_handle, fieldGroupId):
    return _check(dcgmFP("dcgmFieldGroupDestroy")(dcgm_handle, fieldGroupId))


@ensure_byte_strings()
def dcgmWatchFields(dcgm_handle, groupId, fieldGroupId, updateFreq, maxKeepAge, maxKeepSamples):
    return _check(dcgmFP("dcgmWatchFields")(dcgm_handle, groupId, fieldGroupId, c_int64(updateFreq),
                                            c_double(maxKeepAge), c_int32(maxKeepSamples)))


@ensure_byte_strings()
def dcgmUnwatchFields(dcgm_handle, groupId, fieldGroupId):
    return _check(dcgmFP("dcgmUnwatchFields")(dcgm_handle, groupId, fieldGroupId))


@ensure_byte_strings()
def dcgmUpdateAllFields(dcgm_handle, waitForUpdate):
    return _check(dcgmFP("dcgmUpdateAllFields")(dcgm_handle, c_int(waitForUpdate)))


@ensure_byte_strings()
def dcgmEntityGetLatestValues(dcgmHandle, entityGroup, entityId, fieldIds):
    values = (dcgm_structs.c_dcgmFieldValue_v1 * len(fieldIds))()
    ids = (c_uint16 * len(fieldIds))(*fieldIds)
    _check(dcgmFP("dcgmEntityGetLatestValues")(dcgmHandle, c_uint(entityGroup),
                                               dcgm_fields.c_dcgm_field_eid_t(entityId), ids,
                                               c_uint(len(fieldIds)), values))
    return values


@ensure_byte_strings()
def dcgmEntitiesGetLatestValues(dcgmHandle, entities, fieldIds, flags):
    values = (dcgm_structs.c_dcgmFieldValue_v2 * (len(fieldIds) * len(entities)))()
    pairs = (dcgm_structs.c_dcgmGroupEntityPair_t * len(entities))(*entities)
    ids = (c_uint16 * len(fieldIds))(*fieldIds)
    _check(dcgmFP("dcgmEntitiesGetLatestValues")(dcgmHandle, pairs, c_uint(len(entities)), ids,
                                                 c_uint(len(fieldIds)), flags, values))
    return values


@ensure_byte_strings()
def dcgmProfGetSupportedMetricGroups(dcgmHandle, gpuId):
    msg = dcgm_structs.c_dcgmProfGetMetricGroups_v3()
    msg.version = dcgm_structs.dcgmProfGetMetricGroups_version3
    msg.gpuId = gpuId
    _check(dcgmFP("dcgmProfGetSupportedMetricGroups")(dcgmHandle, byref(msg)))
    return msg


@ensure_byte_strings()
def dcgmProfPause(dcgmHandle):
    return _check(dcgmFP("dcgmProfPause")(dcgmHandle))


@ensure_byte_strings()
def dcgmProfResume(dcgmHandle):
    return _check(dcgmFP("dcgmProfResume")(dcgmHandle))


@ensure_byte_strings()
def dcgmVersionInfo():
    msg = dcgm_structs.c_dcgmVersionInfo_v2()
    msg.version = dcgm_structs.dcgmVersionInfo_version2
    _check(dcgmFP("dcgmVersionInfo")(byref(msg)))
    return msg
