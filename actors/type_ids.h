#pragma once
/// CAF type IDs of the actor messages, declared once for the module (CAF 0.17's
/// type-ID block; IDs from caf::first_custom_type_id). The messages are process-local:
/// they hold shared pointers and tensor handles, so they are allowed as "unsafe"
/// (never serialised) message types.
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/type_id.hpp>

#include "actors/messages.h"

CAF_BEGIN_TYPE_ID_BLOCK(specpipe_actors, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::SubmitRequest))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::CancelRequest))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::StatsQuery))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::KvQuery))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::StrategyMetricsQuery))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::KvOccupancy))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::AdmitWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::PrefillWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::PrefillDone))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::AdmitDone))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::DraftStart))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::DraftFinish))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::ReleaseWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::DraftWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::ReserveWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::VerifyWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::VerifyDone))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::RoundDone))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::SpecStats))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::PoolRoomWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::PoolRoomDone))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::ViewCopyWork))
CAF_ADD_TYPE_ID(specpipe_actors, (specpipe::actors::ViewCopyDone))
CAF_END_TYPE_ID_BLOCK(specpipe_actors)

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::SubmitRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::CancelRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::StatsQuery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::KvQuery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::StrategyMetricsQuery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::KvOccupancy)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::AdmitWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::PrefillWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::PrefillDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::AdmitDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::DraftStart)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::DraftFinish)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::ReleaseWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::DraftWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::ReserveWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::VerifyWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::VerifyDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::RoundDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::SpecStats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::PoolRoomWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::PoolRoomDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::ViewCopyWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(specpipe::actors::ViewCopyDone)
