-- CreateTable
CREATE TABLE "Objective" (
    "id" TEXT NOT NULL PRIMARY KEY,
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
    "skipBefore" DATETIME,
    "webhookSecretRef" TEXT,
    "watchPath" TEXT,
    "inboundEmail" TEXT,
    "createdBy" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "ObjectiveRun" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "objectiveId" TEXT NOT NULL,
    "scheduledAt" DATETIME,
    "status" TEXT NOT NULL,
    "turnId" TEXT,
    "outcome" TEXT,
    "error" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "ObjectiveEvent" (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "objectiveId" TEXT NOT NULL,
    "eventId" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "payloadHash" TEXT NOT NULL,
    "runId" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "ActionExecution" (
    "key" TEXT NOT NULL PRIMARY KEY,
    "approvalId" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "result" TEXT,
    "startedAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" DATETIME
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
