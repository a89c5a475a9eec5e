-- CreateTable
CREATE TABLE "Task" (
    "id" TEXT NOT NULL,
    "sourceKey" TEXT,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "sender" TEXT NOT NULL,
    "senderId" TEXT,
    "text" TEXT NOT NULL,
    "lane" TEXT NOT NULL,
    "priority" TEXT NOT NULL,
    "dueAt" TIMESTAMP(3),
    "assignee" TEXT,
    "status" TEXT NOT NULL DEFAULT 'open',
    "origin" TEXT NOT NULL,
    "model" TEXT,
    "reason" TEXT,
    "createdBy" TEXT NOT NULL,
    "remindedAt" TIMESTAMP(3),
    "closedAt" TIMESTAMP(3),
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Task_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "TriageSetting" (
    "bindingId" TEXT NOT NULL,
    "enabled" BOOLEAN NOT NULL DEFAULT false,
    "model" TEXT,
    "updatedBy" TEXT NOT NULL,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "TriageSetting_pkey" PRIMARY KEY ("bindingId")
);

-- CreateIndex
CREATE UNIQUE INDEX "Task_sourceKey_key" ON "Task"("sourceKey");

-- CreateIndex
CREATE INDEX "Task_status_createdAt_idx" ON "Task"("status", "createdAt");

-- CreateIndex
CREATE INDEX "Task_platform_account_chatId_status_idx" ON "Task"("platform", "account", "chatId", "status");
