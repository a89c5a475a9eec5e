-- CreateTable
CREATE TABLE "Objective" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "prompt" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "model" TEXT,
    "schedule" TEXT NOT NULL,
    "overlap" TEXT NOT NULL,
    "catchupWindowMs" INTEGER NOT NULL,
    "pauseOnFailure" BOOLEAN NOT NULL,
    "paused" BOOLEAN NOT NULL DEFAULT false,
    "skipBefore" TIMESTAMP(3),
    "webhookSecretRef" TEXT,
    "watchPath" TEXT,
    "inboundEmail" TEXT,
    "createdBy" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Objective_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ObjectiveRun" (
    "id" TEXT NOT NULL,
    "objectiveId" TEXT NOT NULL,
    "scheduledAt" TIMESTAMP(3),
    "status" TEXT NOT NULL,
    "turnId" TEXT,
    "outcome" TEXT,
    "error" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ObjectiveRun_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ObjectiveEvent" (
    "id" SERIAL NOT NULL,
    "objectiveId" TEXT NOT NULL,
    "eventId" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "payloadHash" TEXT NOT NULL,
    "runId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ObjectiveEvent_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ActionExecution" (
    "key" TEXT NOT NULL,
    "approvalId" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "result" TEXT,
    "startedAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" TIMESTAMP(3),

    CONSTRAINT "ActionExecution_pkey" PRIMARY KEY ("key")
);

-- CreateIndex
CREATE UNIQUE INDEX "Objective_name_key" ON "Objective"("name");

-- CreateIndex
CREATE UNIQUE INDEX "Objective_inboundEmail_key" ON "Objective"("inboundEmail");

-- CreateIndex
CREATE INDEX "ObjectiveRun_objectiveId_createdAt_idx" ON "ObjectiveRun"("objectiveId", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "ObjectiveEvent_objectiveId_eventId_key" ON "ObjectiveEvent"("objectiveId", "eventId");

-- CreateIndex
CREATE UNIQUE INDEX "ActionExecution_approvalId_key" ON "ActionExecution"("approvalId");
